"""django-q2 tasks: each takes ids, calls one service, and is safe to run twice."""
