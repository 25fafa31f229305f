"""What a DDL statement is about: its kind, the databases and tables it touches, secrets.

:func:`ddl_scope` is a pure function of a QUERY event's statement and its default database
(the database unqualified names belong to) and returns a frozen :class:`DdlScope`:

* ``kind``: ``create_table``, ``alter_table``, ``rename_table``, ``drop_table``,
  ``truncate_table``, ``create_index``, ``drop_index``, ``create_view``, ``alter_view``,
  ``drop_view``, ``create_database``, ``alter_database``, ``drop_database``, ``routine``
  (procedures, functions, triggers, events, packages), ``other`` (DDL this module does not
  know), or a kind that is *not about data*: ``account`` (users, roles, passwords),
  ``privilege`` (GRANT, REVOKE), ``server`` (CREATE/ALTER/DROP SERVER, tablespaces,
  resource groups, ALTER INSTANCE), ``plugin`` (INSTALL/UNINSTALL PLUGIN/SONAME/COMPONENT,
  CREATE FUNCTION ... SONAME), ``replication`` (CHANGE MASTER/REPLICATION SOURCE/FILTER,
  START/STOP SLAVE/REPLICA, RESET), ``admin`` (FLUSH, ANALYZE/OPTIMIZE/REPAIR/CHECK TABLE,
  KILL, SET, ...), ``transaction`` (BEGIN, XA, SAVEPOINT, ...);
* ``objects``: ``(database, table)`` pairs, ``table`` None for a database-level object
  (database DDL, routines, and statements whose objects are unknown);
* ``about_data``: False for the kinds above that are not about data -- such a statement
  never reaches a target and is never served to a consumer that filters tables;
* ``credential``: the statement carries a password or key (see :func:`redact_statement`);
* ``parsed``: False when sqlglot could not read the statement: it is kept, scoped by the
  default database (``(default_db, None)``; no objects when there is none), and reported
  once per statement shape (:data:`log` warning), not once per event.

Invariants: names are as written (backquotes removed, doubled backquotes undone, case
kept); a RENAME lists old and new names; ``CREATE TABLE ... LIKE``/``AS SELECT`` and views
list only the object created (what they read is in ``reads``); a statement that is not
about data has no objects. :meth:`DdlScope.names` is the form the change log's table list
takes (docs/formats.md): ``db.table``, ``db.*`` for a database-level object, ``!kind`` alone
for a statement with no data object.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from headwater.schema._statements import IDENT, name_at, unident
from headwater.schema.ddl import _Dialect, strip_comments

__all__ = [
    "NOT_ABOUT_DATA",
    "DdlScope",
    "ddl_scope",
    "redact_statement",
]

log = logging.getLogger(__name__)

#: Kinds of statements that are not about data (never applied, never served filtered).
NOT_ABOUT_DATA = frozenset(
    ("account", "privilege", "server", "plugin", "replication", "admin", "transaction")
)

TableObject = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class DdlScope:
    """What one statement touches (see the module docstring)."""

    kind: str
    objects: tuple[TableObject, ...] = ()
    reads: tuple[TableObject, ...] = ()
    credential: bool = False
    parsed: bool = True

    @property
    def about_data(self) -> bool:
        return self.kind not in NOT_ABOUT_DATA

    def names(self) -> tuple[str, ...]:
        """The change log table-list names: ``db.table``, ``db.*``, or ``("!kind",)``."""
        if not self.objects:
            return (f"!{self.kind}",)
        out: list[str] = []
        for db, table in self.objects:
            name = f"{db}.{'*' if table is None else table}"
            if name not in out:
                out.append(name)
        return tuple(out)


# --- statements that are not about data, by their leading words --------------------------

_W = r"\s+"
_NO_DATA: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.I))
    for kind, pattern in (
        ("transaction", r"(?:BEGIN|COMMIT|ROLLBACK|XA|SAVEPOINT|RELEASE|START\s+TRANSACTION)\b"),
        ("account", rf"(?:CREATE|ALTER|DROP|RENAME)(?:{_W}OR{_W}REPLACE)?{_W}(?:USER|ROLE)\b"),
        ("account", rf"SET{_W}(?:PASSWORD|DEFAULT{_W}ROLE|ROLE)\b"),
        ("privilege", r"(?:GRANT|REVOKE)\b"),
        ("server", rf"(?:CREATE|ALTER|DROP)(?:{_W}OR{_W}REPLACE)?{_W}SERVER\b"),
        (
            "server",
            rf"(?:CREATE|ALTER|DROP)(?:{_W}UNDO)?{_W}(?:TABLESPACE|LOGFILE{_W}GROUP|"
            rf"RESOURCE{_W}GROUP|SPATIAL{_W}REFERENCE{_W}SYSTEM)\b",
        ),
        ("server", rf"ALTER{_W}INSTANCE\b"),
        ("plugin", rf"(?:INSTALL|UNINSTALL){_W}(?:PLUGIN|SONAME|COMPONENT)\b"),
        (
            "plugin",
            rf"CREATE(?:{_W}OR{_W}REPLACE)?(?:{_W}AGGREGATE)?{_W}FUNCTION{_W}"
            rf"(?:IF{_W}NOT{_W}EXISTS{_W})?{IDENT}{_W}RETURNS{_W}\w+{_W}SONAME\b",
        ),
        (
            "replication",
            rf"(?:CHANGE{_W}(?:MASTER|REPLICATION)|(?:START|STOP){_W}(?:SLAVE|REPLICA|"
            rf"ALL{_W}SLAVES|GROUP_REPLICATION)|RESET)\b",
        ),
        (
            "admin",
            rf"(?:FLUSH|KILL|SET|PURGE|SHUTDOWN|RESTART|(?:ANALYZE|OPTIMIZE|REPAIR|CHECK|"
            rf"CHECKSUM){_W}(?:NO_WRITE_TO_BINLOG{_W}|LOCAL{_W})?TABLES?)\b",
        ),
    )
)

# --- statements read here directly (sqlglot reads them as an opaque Command) -------------

_IF_EXISTS = r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
_DEFINER = (
    rf"(?:DEFINER\s*=\s*(?:{IDENT}|'(?:[^']|'')*')(?:\s*@\s*(?:{IDENT}|'(?:[^']|'')*'))?\s+)?"
)
_RENAME = re.compile(r"RENAME\s+TABLES?\s+", re.I)
_RENAME_PAIR = re.compile(r"\s+TO\s+", re.I)
_DATABASE = re.compile(
    rf"(CREATE|ALTER|DROP)(?:\s+OR\s+REPLACE)?\s+(?:DATABASE|SCHEMA)\s+{_IF_EXISTS}", re.I
)
_ALTER_DB_DEFAULT = re.compile(
    r"ALTER\s+(?:DATABASE|SCHEMA)\s+(?:DEFAULT\s+)?(?:CHARACTER\s+SET|CHARSET|COLLATE|"
    r"ENCRYPTION|READ\s+ONLY|COMMENT)\b",
    re.I,
)
_ROUTINE = re.compile(
    rf"(?:CREATE|ALTER|DROP)(?:\s+OR\s+REPLACE)?\s+{_DEFINER}(?:SQL\s+SECURITY\s+\w+\s+)?"
    rf"(?:AGGREGATE\s+)?(?:PROCEDURE|FUNCTION|TRIGGER|EVENT|PACKAGE(?:\s+BODY)?)\s+{_IF_EXISTS}",
    re.I,
)
_INDEX = re.compile(
    rf"(CREATE|DROP)(?:\s+OR\s+REPLACE)?\s+(?:ONLINE\s+|OFFLINE\s+)?"
    rf"(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+{_IF_EXISTS}{IDENT}"
    rf"(?:\s+USING\s+\w+)?\s+ON\s+",
    re.I,
)
_VIEW = re.compile(
    rf"(CREATE|ALTER|DROP)(?:\s+OR\s+REPLACE)?\s+(?:ALGORITHM\s*=\s*\w+\s+)?{_DEFINER}"
    rf"(?:SQL\s+SECURITY\s+\w+\s+)?VIEW\s+{_IF_EXISTS}",
    re.I,
)
_ONE_NAME = re.compile(rf"\s*({IDENT})")
_LIST_SEP = re.compile(r"\s*,\s*")


def _names_list(text: str, pos: int, default_db: str) -> list[TableObject]:
    """``a, b.c, `d`...`` from ``pos`` on."""
    out: list[TableObject] = []
    while True:
        hit = name_at(text, pos, default_db)
        if hit is None:
            break
        out.append(hit[0])
        m = _LIST_SEP.match(text, hit[1])
        if m is None:
            break
        pos = m.end()
    return out


def _rename(text: str, default_db: str) -> list[TableObject] | None:
    m = _RENAME.match(text)
    if m is None:
        return None
    out: list[TableObject] = []
    pos = m.end()
    while True:
        old = name_at(text, pos, default_db)
        to = _RENAME_PAIR.match(text, old[1]) if old else None
        new = name_at(text, to.end(), default_db) if old and to else None
        if old is None or new is None:
            return None
        out += [old[0], new[0]]
        sep = _LIST_SEP.match(text, new[1])
        if sep is None:
            return out if not text[new[1] :].strip() else None
        pos = sep.end()


def _direct(text: str, default_db: str) -> DdlScope | None:
    """The statements whose small grammars are read here (None: not one of them)."""
    renamed = _rename(text, default_db)
    if renamed is not None:
        return DdlScope("rename_table", tuple(renamed))
    if _ALTER_DB_DEFAULT.match(text):  # ALTER DATABASE with no name: the default one
        return DdlScope("alter_database", ((default_db, None),) if default_db else ())
    m = _DATABASE.match(text)
    if m is not None:
        name = _ONE_NAME.match(text, m.end())
        if name is not None:
            return DdlScope(f"{m.group(1).lower()}_database", ((unident(name.group(1)), None),))
    m = _ROUTINE.match(text)
    if m is not None:
        hit = name_at(text, m.end(), default_db)
        if hit is not None:
            return DdlScope("routine", ((hit[0][0], None),))
    m = _INDEX.match(text)
    if m is not None:
        hit = name_at(text, m.end(), default_db)
        if hit is not None:
            return DdlScope(f"{m.group(1).lower()}_index", (hit[0],))
    m = _VIEW.match(text)
    if m is not None:
        views = _names_list(text, m.end(), default_db)
        if views:
            verb = m.group(1).lower()
            return DdlScope(f"{verb}_view", tuple(views if verb == "drop" else views[:1]))
    return None


# --- everything else: sqlglot ---------------------------------------------------------------


def _key(table: exp.Table, default_db: str) -> TableObject:
    return (table.db or default_db, table.name)


def _quiet(_record: logging.LogRecord) -> bool:
    return False


_TABLE_HEAD = re.compile(
    rf"(CREATE|ALTER)(?:\s+OR\s+REPLACE)?(?:\s+TEMPORARY)?(?:\s+ONLINE|\s+OFFLINE)?"
    rf"(?:\s+IGNORE)?\s+TABLE\s+{_IF_EXISTS}",
    re.I,
)
_RENAMES = re.compile(r"\bRENAME\b(?!\s+(?:COLUMN|INDEX|KEY)\b)", re.I)


def _table_head(text: str, default_db: str) -> DdlScope | None:
    """An unreadable CREATE/ALTER TABLE that renames nothing: the table it names."""
    m = _TABLE_HEAD.match(text)
    if m is None or _RENAMES.search(text) is not None:
        return None
    hit = name_at(text, m.end(), default_db)
    if hit is None:
        return None
    return DdlScope(f"{m.group(1).lower()}_table", (hit[0],), parsed=False)


def _sqlglot(text: str, default_db: str) -> DdlScope | None:
    """CREATE/ALTER/DROP TABLE, TRUNCATE, sequences, via sqlglot (None: not read)."""
    sqlglot_log = logging.getLogger("sqlglot")
    sqlglot_log.addFilter(_quiet)  # its "falling back to a Command" line: reported below
    try:
        trees = [t for t in sqlglot.parse(text, read=_Dialect) if t is not None]
    except (SqlglotError, ValueError, RecursionError):
        return None
    finally:
        sqlglot_log.removeFilter(_quiet)
    if len(trees) != 1:
        return None
    tree = trees[0]
    if isinstance(tree, exp.TruncateTable):
        return DdlScope(
            "truncate_table", tuple(_key(t, default_db) for t in tree.expressions or [])
        )
    if not isinstance(tree, exp.Create | exp.Drop | exp.Alter):
        return None
    kind = str(tree.args.get("kind") or "").upper()
    verb = type(tree).__name__.lower()
    if kind not in ("TABLE", "SEQUENCE"):
        return None
    if isinstance(tree, exp.Drop):
        tables = [t for t in tree.args.get("tables") or [] if isinstance(t, exp.Table)]
        if not tables and isinstance(tree.this, exp.Table):
            tables = [tree.this]
        return (
            DdlScope("drop_table", tuple(_key(t, default_db) for t in tables)) if tables else None
        )
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    if not isinstance(target, exp.Table):
        return None
    objects = [_key(target, default_db)]
    reads: list[TableObject] = []
    if isinstance(tree, exp.Alter):
        for action in tree.args.get("actions") or []:
            if isinstance(action, exp.AlterRename) and isinstance(action.this, exp.Table):
                objects.append(_key(action.this, default_db))
    else:
        for t in tree.find_all(exp.Table):
            key = _key(t, default_db)
            if t is not target and key not in reads and key not in objects:
                reads.append(key)
    return DdlScope(f"{verb}_table", tuple(objects), tuple(reads))


# --- the classifier ---------------------------------------------------------------------------

_SHAPE_TOKENS = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`(?:[^`]|``)*`|\d+")
_reported: set[str] = set()


def _shape(text: str) -> str:
    """The statement with names and literals blanked, first words only: one log line each."""
    return " ".join(_SHAPE_TOKENS.sub("?", text).split()[:4]).upper()


@functools.lru_cache(maxsize=4096)
def ddl_scope(sql: str, default_db: str) -> DdlScope:
    """Classify one QUERY event statement (see the module docstring); never raises."""
    text = strip_comments(sql)
    for kind, pattern in _NO_DATA:
        if pattern.match(text):
            return DdlScope(kind, credential=_has_credential(sql))
    scope = _direct(text, default_db) or _sqlglot(text, default_db)
    if scope is not None:
        return _with_connection(scope, sql)
    scope = _table_head(text, default_db)
    shape = _shape(text)
    if shape not in _reported:
        if len(_reported) < 10_000:
            _reported.add(shape)
        log.warning(
            "DDL not understood by sqlglot, scoped by %s: %.200s",
            "the table it names" if scope else f"its default database {default_db!r}",
            _redacted_text(sql),
        )
    if scope is None:
        objects: tuple[TableObject, ...] = ((default_db, None),) if default_db else ()
        scope = DdlScope("other", objects, parsed=False)
    return _with_connection(scope, sql)


def _with_connection(scope: DdlScope, sql: str) -> DdlScope:
    """A data statement with a FEDERATED/CONNECT table's password in CONNECTION=."""
    if _CONNECTION.search(sql) is None:
        return scope
    return DdlScope(scope.kind, scope.objects, scope.reads, credential=True, parsed=scope.parsed)


# --- credentials ------------------------------------------------------------------------------

#: A string literal as the servers read it: quotes doubled or backslash-escaped, an
#: optional character set introducer (``_utf8mb4'...'``), or a hex/binary literal.
_LITERAL = (
    rb"(?:_\w+\s*)?(?:'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|[xX]'[0-9a-fA-F]*'|"
    rb"0x[0-9a-fA-F]+|[bB]'[01]*')"
)
#: Where a credential literal is: after IDENTIFIED [WITH plugin] BY/AS/USING (MySQL 8
#: ``IDENTIFIED WITH 'caching_sha2_password' AS '<hash>'`` as it logs CREATE USER,
#: sql/sql_rewrite.cc; MariaDB ``IDENTIFIED VIA plugin USING 'x'``, sql/sql_acl.cc), in
#: ``PASSWORD('...')``/``OLD_PASSWORD``, ``SET PASSWORD ... = '...'``, CHANGE MASTER's
#: ``MASTER_PASSWORD``/``SOURCE_PASSWORD``/``MASTER_SSL_KEY``-less options, and
#: ``OPTIONS (PASSWORD '...')`` of CREATE/ALTER SERVER (sql/sql_servers.cc).
_SECRET_BEFORE = re.compile(
    rb"(?:\bIDENTIFIED\s+(?:(?:WITH|VIA)\s+(?:" + _LITERAL + rb"|[\w$]+)\s+)?"
    rb"(?:BY|AS|USING)(?:\s+PASSWORD\b)?"
    rb"|\bPASSWORD\s*\("
    rb"|\b(?:MASTER|SOURCE)_PASSWORD\s*="
    rb"|\bSET\s+PASSWORD\b[^=]*="
    rb"|\bPASSWORD\s+(?=['\"_xXbB0])"
    rb"|\b(?:OR|AND)\s+(?:IDENTIFIED\s+)?(?:WITH|VIA)\s+[\w$]+\s+(?:BY|AS|USING)"
    rb")\s*(?:PASSWORD\s*\(\s*)?",
    re.I,
)
_SECRET = re.compile(rb"(" + _SECRET_BEFORE.pattern + rb")(" + _LITERAL + rb")", re.I)
#: Any statement that mentions these may carry a secret we could not place.
#: (The compiled reader, headwater/_native/ingest.c ``has_credential_word``, hands any
#: ANNOTATE_ROWS text with one of these words, in any case, to Python: keep them in step.)
CREDENTIAL_WORDS = re.compile(rb"IDENTIFIED|PASSWORD|\bCONNECTION\b", re.I)
_CREDENTIAL_WORDS = CREDENTIAL_WORDS
#: FEDERATED/CONNECT tables: CONNECTION='mysql://user:password@host:port/db/table'.
_CONNECTION = re.compile(r"\bCONNECTION\s*=?\s*['\"][^'\"]*://[^'\"/@:]*:[^'\"@]*@", re.I)
_CONNECTION_B = re.compile(rb"(\bCONNECTION\s*=?\s*['\"][^'\"]*://[^'\"/@:]*:)([^'\"@]*)(@)", re.I)
REDACTED = b"'<redacted>'"
_MARKER = b" /* headwater: statement redacted, it carried a credential */"
_LEAD = re.compile(rb"\s*(?:/\*.*?\*/\s*)*((?:[A-Za-z_]+\s+){0,2}[A-Za-z_]+)", re.S)


def redact_statement(query: bytes, scope: DdlScope) -> bytes | None:
    """``query`` with its credentials replaced by ``'<redacted>'``; None: nothing to hide.

    Works on the statement's bytes as logged (every client character set the servers
    accept keeps ASCII quotes and keywords as single bytes). When a credential keyword is
    still followed by a literal after the replacements -- a form this module does not
    know -- only the statement's leading words and a marker are kept, so that no unknown
    form can leak.
    """
    if not scope.credential:
        return None
    if scope.about_data:  # only a CONNECTION= URL can carry one (see _with_connection)
        return _CONNECTION_B.sub(rb"\1<redacted>\3", query)
    out = _SECRET.sub(lambda m: m.group(1) + REDACTED, query)
    if _LEFTOVER.search(out.replace(REDACTED, b"?")) is not None:
        lead = _LEAD.match(query)
        return (lead.group(1) if lead else b"") + _MARKER
    return out if out != query else None


def redact_annotation(query: bytes) -> bytes | None:
    """The statement of an ANNOTATE_ROWS event (the text of a DML statement that MariaDB
    logs before its row events, ``binlog_annotate_row_events``) with its credentials
    replaced; None: nothing to hide. ``PASSWORD('...')`` and friends as in DDL; when a
    credential keyword is still followed by a literal (``SET password = '...'`` on a
    column of that name), only the leading words and a marker are kept: the statement
    is informational, its rows are in the row events."""
    if _CREDENTIAL_WORDS.search(query) is None:
        return None
    out = _CONNECTION_B.sub(rb"\1<redacted>\3", _SECRET.sub(lambda m: m.group(1) + REDACTED, query))
    if _LEFTOVER.search(out.replace(REDACTED, b"?")) is not None:
        lead = _LEAD.match(query)
        return (lead.group(1) if lead else b"") + _MARKER
    return out if out != query else None


#: A credential keyword followed by nothing but syntax and then a quote.
_LEFTOVER = re.compile(
    rb"\b(?:IDENTIFIED|PASSWORD)(?:\s|\(|=|\bBY\b|\bAS\b|\bUSING\b|\bPASSWORD\b)*['\"]", re.I
)


def _has_credential(sql: str) -> bool:
    raw = sql.encode("utf-8", "surrogateescape")
    return _SECRET.search(raw) is not None or _LEFTOVER.search(raw) is not None


def _redacted_text(sql: str) -> str:
    """``sql`` safe for a log line."""
    raw = sql.encode("utf-8", "surrogateescape")
    if _CREDENTIAL_WORDS.search(raw) is None:
        return sql
    out = _SECRET.sub(lambda m: m.group(1) + REDACTED, raw)
    out = _CONNECTION_B.sub(rb"\1<redacted>\3", out)
    if _LEFTOVER.search(out.replace(REDACTED, b"?")) is not None:
        return _shape(sql) + " <redacted>"
    return out.decode("utf-8", "replace")
