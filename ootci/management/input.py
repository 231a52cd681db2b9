"""What the import commands read: a file, or standard input for ``-``, with a CommandError that says what is wrong."""

import sys
from pathlib import Path

from django.core.management.base import CommandError


def text_of(path: str, options: dict) -> str:
    if path == "-":
        return options.get("stdin", sys.stdin).read()
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise CommandError(f"{path} is not UTF-8 text") from None
