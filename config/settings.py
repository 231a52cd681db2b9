"""Settings: the one place that reads the environment (every variable is in .env.example)."""

from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")

DEBUG = env.bool("DJANGO_DEBUG", default=False)

SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=[])
if DEBUG:
    SECRET_KEY = SECRET_KEY or "insecure-development-key-do-not-use-in-production"
    ALLOWED_HOSTS = ALLOWED_HOSTS or ["127.0.0.1", "localhost", "[::1]"]
else:
    # Fail closed: a production process never starts on a guessable key or open hosts.
    if len(SECRET_KEY) < 50:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set to a random string of 50+ characters when DJANGO_DEBUG is off"
        )
    if not ALLOWED_HOSTS:
        raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must list the served host names when DJANGO_DEBUG is off")
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "ootci",
    "relay",
    "hud",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.csp.content_security_policy",
    # Compress pages (the backend page: 138 KB → 13 KB) after ConditionalGet has tagged them with an ETag, so an
    # unchanged page or refresh fragment is answered 304.
    "django.middleware.gzip.GZipMiddleware",
    "django.middleware.http.ConditionalGetMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "hud.web.middleware.unit_of_work",
    "ootci.http.errors.DatabaseUnavailableMiddleware",
]
# The relay's write endpoints (/github/…, /api/crcr/…) go through this chain instead (config/handlers.py, gunicorn's
# config.wsgi): none of the HUD's, which did nothing for them but cost every callback CPU.
WRITE_ENDPOINT_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "ootci.http.errors.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "hud.web.views.analytics_fallback",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded default runs a web process and a worker on one file: wait for locks instead of failing.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["ENGINE"] = "ootci.postgresql"  # Django's, with a health check without a round trip
    # No JIT: compiling a HUD statement whose estimated cost passes jit_above_cost takes longer (~0.2 s) than the
    # part of its run it saves, and nothing else here runs long enough to gain from it. work_mem: the HUD's and the
    # readiness schedule's statements sort the latest attempts of every job in a window; at PostgreSQL's 4 MB those
    # sorts spill to disk (readiness of 100 backends on 1 M job results: ~7 s, in memory ~3.4 s).
    options = DATABASES["default"].setdefault("OPTIONS", {})
    work_mem = env.str("DATABASE_WORK_MEM", default="64MB")
    options["options"] = f"{options.get('options', '')} -c jit=off -c work_mem={work_mem}".strip()
    # The callback's hot statements (ootci.rows.prepared_cursor) prepared the 5th time a connection runs them; the
    # ORM's own cursors bind on the client and are never prepared. Off: behind a pooler that cannot keep them.
    options["prepare_threshold"] = 5 if env.bool("DATABASE_PREPARED", default=True) else None
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="")
# Connect and read timeouts of every Redis client (cache, broker; the rate limiter uses less): a Redis that is down
# or hanging costs a request at most this, never GitHub's 10 s webhook timeout.
REDIS_TIMEOUT_SECONDS = 1.0
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"socket_connect_timeout": REDIS_TIMEOUT_SECONDS, "socket_timeout": REDIS_TIMEOUT_SECONDS},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "ootci_cache"}}

Q_CLUSTER = {
    "name": "ootci",
    "workers": env.int("Q_WORKERS", default=2),
    "timeout": 120,
    "retry": 180,
    "max_attempts": 1,  # our tasks retry on their own schedule; the broker must not re-run them blindly
    "catch_up": False,
    "save_limit": 1000,
    "ack_failures": True,
    "sync": env.bool("Q_SYNC", default=False),
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
    Q_CLUSTER["broker_class"] = "ootci.broker.RedisBroker"  # django-q2's, with the short timeouts above
else:
    Q_CLUSTER["orm"] = "default"
    Q_CLUSTER["poll"] = 0.2

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env.path("DJANGO_STATIC_ROOT", default=BASE_DIR / "staticfiles")

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "OOT CI",
    "DESCRIPTION": "Cross-repository CI relay and HUD for PyTorch out-of-tree backends",
    "VERSION": "1.0.0",
}

if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

# --- OOT CI -----------------------------------------------------------------------------------

UPSTREAM_REPO = env.str("UPSTREAM_REPO", default="pytorch/pytorch")
GITHUB_API_URL = env.str("GITHUB_API_URL", default="https://api.github.com").rstrip("/")
GITHUB_APP_ID = env.str("GITHUB_APP_ID", default="")
GITHUB_APP_PRIVATE_KEY = env.str("GITHUB_APP_PRIVATE_KEY", default="", multiline=True)
if GITHUB_APP_PRIVATE_KEY and "-----BEGIN" not in GITHUB_APP_PRIVATE_KEY:
    key_path = Path(GITHUB_APP_PRIVATE_KEY)
    if not key_path.is_file():
        raise ImproperlyConfigured(f"GITHUB_APP_PRIVATE_KEY is neither PEM text nor a readable file: {key_path}")
    GITHUB_APP_PRIVATE_KEY = key_path.read_text()
GITHUB_WEBHOOK_SECRET = env.str("GITHUB_WEBHOOK_SECRET", default="")

OIDC_ISSUER = env.str("OIDC_ISSUER", default="https://token.actions.githubusercontent.com").rstrip("/")
OIDC_AUDIENCE = env.str("OIDC_AUDIENCE", default="pytorch-cross-repo-ci-relay")
OIDC_JWKS_URL = env.str("OIDC_JWKS_URL", default="") or f"{OIDC_ISSUER}/.well-known/jwks"
# Buildkite's agent tokens: issuer and key set are trust anchors, set here only (never from the database); its
# pipelines are mapped to backends in the database (ootci.models.identities). An empty issuer refuses Buildkite.
OIDC_BUILDKITE_ISSUER = env.str("OIDC_BUILDKITE_ISSUER", default="https://agent.buildkite.com").rstrip("/")
OIDC_BUILDKITE_JWKS_URL = env.str("OIDC_BUILDKITE_JWKS_URL", default="") or f"{OIDC_BUILDKITE_ISSUER}/.well-known/jwks"
if OIDC_BUILDKITE_ISSUER and (OIDC_BUILDKITE_ISSUER == OIDC_ISSUER or OIDC_BUILDKITE_JWKS_URL == OIDC_JWKS_URL):
    # One key set trusted for two issuers would let a token of one CI system speak for the other's identities.
    raise ImproperlyConfigured("OIDC_BUILDKITE_ISSUER and its JWKS URL must differ from OIDC_ISSUER and OIDC_JWKS_URL.")
# How long a process keeps its copy of the Buildkite pipeline map: an edit in the admin or by import_ci_providers
# takes effect within this many seconds, with no restart.
OIDC_IDENTITY_MAP_SECONDS = env.float("OIDC_IDENTITY_MAP_SECONDS", default=30)
# Seconds between forced JWKS refetches for an unknown `kid` (a token with a made-up kid must not make us hammer
# the issuer); the key set itself is cached for 5 minutes.
OIDC_JWKS_REFRESH_COOLDOWN_SECONDS = env.float("OIDC_JWKS_REFRESH_COOLDOWN_SECONDS", default=30)

CLICKHOUSE_URL = env.str("CLICKHOUSE_URL", default="")
ARCHIVE_URL = env.str("ARCHIVE_URL", default="")
# The intermediate store of raw test reports and job logs (relay.reliability.archive): s3://bucket/prefix or file:///path.
TEST_REPORTS_URL = env.str("TEST_REPORTS_URL", default="") or (BASE_DIR / "var" / "test-reports").as_uri()
# Days raw test reports stay in TEST_REPORTS_URL (parsed rows stay); the daily "relay: clean test reports" schedule.
TEST_REPORTS_RETENTION_DAYS = env.int("TEST_REPORTS_RETENTION_DAYS", default=30)
AWS_ENDPOINT_URL = env.str("AWS_ENDPOINT_URL", default="")
# Failed jobs' logs (relay.reports.logs): kept in TEST_REPORTS_URL up to this size (the rest is not stored) and deleted
# after this many days by the `relay: purge old job logs` schedule.
JOB_LOG_MAX_BYTES = env.int("JOB_LOG_MAX_BYTES", default=200 * 1024 * 1024)
JOB_LOG_RETENTION_DAYS = env.int("JOB_LOG_RETENTION_DAYS", default=30)
HUD_INGEST_TOKEN = env.str("HUD_INGEST_TOKEN", default="")

# Dispatch fan-out: one task per delivery sends on a thread pool (q2 workers are processes, too few for 100
# backends at GitHub's latency): DISPATCH_CONCURRENCY requests in flight at once, on threads that hold no database
# connection (the task's own thread writes). GitHub allows 100 concurrent requests per App installation. A dispatch is
# tried at most DISPATCH_MAX_ATTEMPTS times per round, with exponential backoff and full jitter; rate-limit waits are
# not counted. A pending row untouched for DISPATCH_STALE_SECONDS is presumed lost (worker crash, broker message lost)
# and sent again by the sweeper.
GITHUB_TIMEOUT_SECONDS = env.int("GITHUB_TIMEOUT_SECONDS", default=10)
# How long GitHub's word that a self-reported upstream SHA is a commit is kept (relay.endpoints.sha_check).
SHA_CHECK_CACHE_SECONDS = env.int("SHA_CHECK_CACHE_SECONDS", default=3600)
DISPATCH_CONCURRENCY = env.int("DISPATCH_CONCURRENCY", default=100)
DISPATCH_MAX_ATTEMPTS = env.int("DISPATCH_MAX_ATTEMPTS", default=5)
DISPATCH_RETRY_BASE_SECONDS = env.float("DISPATCH_RETRY_BASE_SECONDS", default=1.0)
DISPATCH_RETRY_MAX_SECONDS = env.float("DISPATCH_RETRY_MAX_SECONDS", default=20.0)
DISPATCH_RATE_LIMIT_MAX_WAIT_SECONDS = env.float("DISPATCH_RATE_LIMIT_MAX_WAIT_SECONDS", default=30.0)
DISPATCH_STALE_SECONDS = env.int("DISPATCH_STALE_SECONDS", default=120)

# The bulk task of successful jobs' follow-ups (relay.reports.follow_up_queue) waits this long on an empty list for
# more before it ends: a burst's follow-ups are one task (it holds one task worker meanwhile). 0: it ends at once.
FOLLOW_UPS_LINGER_SECONDS = env.float("FOLLOW_UPS_LINGER_SECONDS", default=0.25)

CALLBACK_RATE_LIMIT_PER_MIN = env.int("CALLBACK_RATE_LIMIT_PER_MIN", default=100)
# An echoed callback_token older than this is refused (403): GitHub keeps a run re-runnable for 30 days.
CALLBACK_TOKEN_MAX_AGE_DAYS = env.float("CALLBACK_TOKEN_MAX_AGE_DAYS", default=30)
ZOMBIE_TIMEOUT_HOURS = env.float("ZOMBIE_TIMEOUT_HOURS", default=6)
# A dispatch GitHub keeps refusing with a 5xx, a timeout or a rate limit after its round of DISPATCH_MAX_ATTEMPTS is
# left pending and tried again by the stale-dispatch schedule, one try at a time with capped exponential backoff
# (up to DISPATCH_RETRY_LATER_MAX_SECONDS apart), until this many hours after it was created; then it fails.
# The default matches ZOMBIE_TIMEOUT_HOURS: a dispatch sent later than that would be counted as lost anyway.
DISPATCH_RETRY_WINDOW_HOURS = env.float("DISPATCH_RETRY_WINDOW_HOURS", default=ZOMBIE_TIMEOUT_HOURS)
DISPATCH_RETRY_LATER_MAX_SECONDS = env.float("DISPATCH_RETRY_LATER_MAX_SECONDS", default=1800.0)

# Verdicts (ootci/verdicts.py, relay/reports/verdicts.py): how long a failed job's L3/L4 check run waits for its
# verdict (its test report, else its log's classification) before concluding on what is known; how many failed jobs
# of one upstream event mean an outage, when infra failures are not re-run automatically.
VERDICT_WAIT_SECONDS = env.float("VERDICT_WAIT_SECONDS", default=120.0)
AUTO_RETRY_OUTAGE_JOBS = env.int("AUTO_RETRY_OUTAGE_JOBS", default=5)
# Breaks (relay/breaks/): suspects ranked per break (at most), and the bisection dispatches one backend may be sent in
# 24 h (a bisection stops at the cap; 0: no bisection at all).
BREAK_SUSPECTS_KEPT = env.int("BREAK_SUSPECTS_KEPT", default=50)
BISECT_DAILY_CAP = env.int("BISECT_DAILY_CAP", default=10)
BISECT_STEP_HOURS = env.int("BISECT_STEP_HOURS", default=12)  # a bisection step without a result is inconclusive

# Level gates (ootci/gates.py holds the table): limits overridden per level and gate, as JSON, e.g.
# {"L4": {"queue_avg_minutes": 20}}. The figures they are read against come from the HUD (``gates.figures_from``).
LEVEL_GATES = env.json("LEVEL_GATES", default={})
# On-call notifications (relay/alerts/notify.py): tries per notification, first retry delay (doubling), the public URL
# the messages link to, and Django's email backend (EMAIL_URL, e.g. smtp+tls://user:pass@host:587) and sender.
NOTIFY_MAX_ATTEMPTS = env.int("NOTIFY_MAX_ATTEMPTS", default=5)
# No webhook from UPSTREAM_REPO for this long while GitHub answers the App opens a stale_results incident (0: never).
WEBHOOK_SILENCE_MINUTES = env.int("WEBHOOK_SILENCE_MINUTES", default=120)
# More than this many of a backend's tests starting to skip in one day opens a skips_growing incident (the skip
# ledger, ootci.ledger); an alert rule's own threshold above 0 wins.
SKIP_ALERT_TESTS = env.int("SKIP_ALERT_TESTS", default=50)
# The journal (relay/reliability/journal.py): entries are signed with this key (empty: one derived from SECRET_KEY) and
# refused on replay, to the dead letters, when forged or older than JOURNAL_MAX_AGE_HOURS.
JOURNAL_KEY = env.str("JOURNAL_KEY", default="")
JOURNAL_MAX_AGE_HOURS = env.float("JOURNAL_MAX_AGE_HOURS", default=72)
NOTIFY_RETRY_SECONDS = env.float("NOTIFY_RETRY_SECONDS", default=30.0)
PUBLIC_URL = env.str("PUBLIC_URL", default="")
_email = env.email_url("EMAIL_URL", default="consolemail://")
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
EMAIL_HOST, EMAIL_PORT = _email.get("EMAIL_HOST") or "localhost", _email.get("EMAIL_PORT") or 25
EMAIL_HOST_USER, EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_USER", ""), _email.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS, EMAIL_USE_SSL = _email.get("EMAIL_USE_TLS", False), _email.get("EMAIL_USE_SSL", False)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="oot-ci@localhost")
# HUD colours: a pass rate at or above this is "good", within 15 points of it "fair" (the reference HUD's L3 colour).
HUD_PASS_RATE_GOOD = env.float("HUD_PASS_RATE_GOOD", default=90.0)
# Seconds the HUD serves an aggregate figure from the cache (0: compute on every request). The default pages' figures
# are recomputed every minute (hud.tasks.figures_refresh); three minutes leave room for a late or slow run.
HUD_CACHE_SECONDS = env.int("HUD_CACHE_SECONDS", default=180)
