app_name = "relay"
urlpatterns: list = []
