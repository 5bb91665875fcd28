"""Names from the config and the store (sweeps, `stages` scenarios, hosts, backends, machine ids)
as they land in the report's page and files.

- `name_part`: the one mapping from such a name to its part of a chart name, which is the chart's
  element id, its PNG and SVG file stem and its key among the page's specs. A name that is
  already safe (lower-case ASCII letters, digits, `_` and `-`, at most 64 characters) is its own
  part, so the files of today's names keep their names (`reuse_time_weight_reuse.png`). Any
  other name becomes a slug (each other character `_`, at most 40 characters) plus `_` and ten
  hex digits of the SHA-256 of its exact text: one to one (up to the hash), stable across
  builds, safe in a file name, an id, a CSS selector and a URL, and distinct from every other
  part even on a file system that ignores case (`Tiny` and `tiny` are two files).
- `script_json`: data as JSON inside a <script> element: `<`, `>`, `&`, U+2028 and U+2029 are
  written as `\\u003c` and so on, so that neither `</script>` nor `<!--` can appear in it.
- `attribute` and `url`: text for an HTML attribute, and a file name or fragment for an href.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import urllib.parse

SAFE_NAME = re.compile(r"[a-z0-9_-]{1,64}")
UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9_-]")
SLUG_CHARS = 40
HASH_CHARS = 10

_SCRIPT_ESCAPES = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)


def name_part(name: object) -> str:
    """`name` as a part of a chart name: itself when safe, else a slug and a hash of it."""
    text = str(name)
    if SAFE_NAME.fullmatch(text):
        return text
    slug = UNSAFE_CHAR.sub("_", text)[:SLUG_CHARS]
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{slug}_{digest}"


def duplicates(names: list[str]) -> list[str]:
    """The names that occur more than once, ignoring case (as some file systems do)."""
    seen: dict[str, str] = {}
    found = []
    for name in names:
        key = name.casefold()
        if key in seen and seen[key] not in found:
            found.append(seen[key])
        seen.setdefault(key, name)
    return found


def script_json(value: object) -> str:
    """`value` as JSON that is safe inside a <script> element (and still the same value)."""
    return json.dumps(value).translate(_SCRIPT_ESCAPES)


def attribute(text: object) -> str:
    """Text for an HTML attribute value (either quote)."""
    return html.escape(str(text), quote=True)


def url(text: object) -> str:
    """A file name or fragment for an href, percent-encoded, then escaped for the attribute."""
    return attribute(urllib.parse.quote(str(text), safe=""))
