#!/usr/bin/env bash
# Run OOT CI on the embedded default: SQLite, ORM task broker, demo data, a local admin login.
source "$(dirname "$0")/venv.sh"
export DJANGO_DEBUG="${DJANGO_DEBUG:-true}"
py=.venv/bin/python
echo "==> migrating the SQLite database"
$py manage.py migrate --no-input -v0
$py manage.py createcachetable
echo "==> loading demo data"
$py manage.py seed_demo
password=$($py manage.py shell -v 0 -c '
from django.contrib.auth import get_user_model
import secrets
User = get_user_model()
user = User.objects.filter(username="admin").first() or User(username="admin", is_staff=True, is_superuser=True)
password = secrets.token_urlsafe(12)
user.set_password(password)
user.save()
print(password)')
echo "==> starting the task worker (manage.py qcluster)"
$py manage.py qcluster >var-qcluster.log 2>&1 &
worker=$!
trap 'kill $worker 2>/dev/null' EXIT
cat <<MSG

  OOT CI is running at   http://127.0.0.1:8000/oot/
  Admin:                 http://127.0.0.1:8000/admin/   user: admin   password: $password
  (worker log: var-qcluster.log; stop with Ctrl-C)

MSG
$py manage.py runserver 127.0.0.1:8000
