app_name = "hud"
urlpatterns: list = []
