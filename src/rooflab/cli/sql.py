"""`rooflab sql`: SQL on the store, statement by statement, from a terminal or a pipe; `rooflab
schema`: its tables and views with their columns, types and units."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from rooflab.cli.output import column_unit
from rooflab.cli.store import print_result, query_rows
from rooflab.records import DERIVED_TABLES, TABLES
from rooflab.store import VIEWS_SQL, StoreError, split_statements

PROMPT, MORE = "rooflab> ", "    ...> "
HELP = (
    "Each statement ends with ';' and runs read-only on the store, as `rooflab query` runs it "
    "(the file is held only while it runs, so an ingest can go ahead in between; TEMP tables "
    "last one statement). `rooflab schema` lists the tables and views; .quit or Ctrl-D leaves."
)


def _reader(interactive: bool) -> Callable[[str], str | None]:
    """The next line of input (None at its end), after a prompt on a terminal."""
    if not interactive:
        return lambda prompt: sys.stdin.readline() or None
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())

    def read(prompt: str) -> str | None:
        try:
            return input(prompt) + "\n"
        except EOFError:
            print(file=sys.stderr)
            return None

    return read


def _scripts(interactive: bool) -> Iterator[str]:
    """Text that ends in ';' (one or more statements), and what is left when the input ends."""
    read, buffer = _reader(interactive), ""
    while True:
        try:
            line = read(MORE if buffer.strip() else PROMPT)
        except KeyboardInterrupt:  # Ctrl-C on a terminal: drop the statement typed so far
            print("^C", file=sys.stderr)
            buffer = ""
            continue
        if line is None:
            break
        if not buffer.strip() and line.strip() in (".quit", ".exit"):
            return
        if not buffer.strip() and line.strip() == ".help":
            print(HELP, file=sys.stderr)
            continue
        buffer += line
        if buffer.rstrip().endswith(";"):
            yield buffer
            buffer = ""
    if buffer.strip():
        yield buffer


def cmd_sql(args) -> None:
    interactive = sys.stdin.isatty()
    if interactive:
        print(
            f"rooflab sql on {args.db}, read-only: end each statement with ';'. .help says more; "
            ".quit or Ctrl-D leaves.",
            file=sys.stderr,
        )
    failed = ran = shown = 0
    for script in _scripts(interactive):
        try:
            statements = split_statements(script)
        except StoreError as error:  # it cannot be parsed: one failure, whatever it held
            statements, ran, failed = [], ran + 1, failed + 1
            print(f"rooflab: error: {error}", file=sys.stderr)
        for statement in statements:
            ran += 1
            try:
                rows = query_rows(args.db, statement)
            except StoreError as error:
                failed += 1
                print(f"rooflab: error: {error}", file=sys.stderr)
                continue
            if args.format == "table" and shown:
                print()  # a blank line between one result's table and the next
            print_result(rows, args.format)
            shown += 1
            sys.stdout.flush()
    if failed and not interactive:
        raise StoreError(f"{failed} of {ran} statement(s) failed (said above)")


_CATALOG_SQL = """
    SELECT c.table_name AS name, t.table_type, c.column_name, c.data_type
    FROM information_schema.columns AS c
    JOIN information_schema.tables AS t
      ON t.table_catalog = c.table_catalog AND t.table_schema = c.table_schema
     AND t.table_name = c.table_name
    WHERE c.table_catalog = current_database() AND c.table_schema = 'main'
    ORDER BY c.table_name, c.ordinal_position
"""


def _kind(name: str, table_type: str) -> str:
    from rooflab.store.comparisons import STORE_TABLES

    if name in DERIVED_TABLES or name in STORE_TABLES:
        return "derived table"
    if name in TABLES:
        return "table"
    return "view" if table_type == "VIEW" else table_type.lower()


def _unit(column: str, columns: list[str]) -> str:
    """A column's unit from its name (output.column_unit); `per row: <column>` where a sibling
    column holds it (value and unit, amount and amount_unit)."""
    if f"{column}_unit" in columns:
        return f"per row: {column}_unit"
    if column == "value" and "unit" in columns:
        return "per row: unit"
    return column_unit(column)[0] or ""


def cmd_schema(args) -> None:
    relations: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    for row in query_rows(args.db, _CATALOG_SQL):
        kind = _kind(row["name"], row["table_type"])
        relations.setdefault(row["name"], (kind, []))[1].append(
            (row["column_name"], row["data_type"])
        )
    known = [*TABLES, *VIEWS_SQL]
    order = [n for n in known if n in relations] + sorted(set(relations) - set(known))
    if args.name is None:
        rows = [
            {"name": name, "kind": relations[name][0], "columns": len(relations[name][1])}
            for name in order
        ]
        print_result(rows, args.format)
        return
    if args.name not in relations:
        raise StoreError(
            f"no table or view {args.name!r} in {args.db}; tables and views: {', '.join(order)}"
        )
    columns = relations[args.name][1]
    names = [column for column, _ in columns]
    rows = [
        {"column": column, "type": data_type, "unit": _unit(column, names)}
        for column, data_type in columns
    ]
    print_result(rows, args.format)
