#!/usr/bin/env python3
# Checks that docs/api.md documents exactly what proto/matserve/v1/*.proto defines (ctest
# docs_api). The rules, which docs/api.md follows:
#   - The service table (a table whose first header cell is "rpc") lists every RPC of every
#     service, with its request and reply types (`stream X` for a streamed side), and no other.
#   - Every message and enum has a heading that names it (as a word of the heading, e.g.
#     "### `MultiplyRequest`"); within the sections of those headings (down to the next heading of
#     the same or a higher level) each of its fields, or enum values, appears in backticks.
#   - A table whose first header cell is "field" documents the message(s) its heading names: every
#     backticked name in its first column is a field of one of them. A "value" table likewise names
#     only values of the enum(s) its heading names.
#   - Backticked type names in headings, and `Type.field` references anywhere, name what exists.
#   - Every server flag that docs/api.md names (`--name`) is defined in server/config.cc.
# Usage: check_api_doc.py [--root REPO]; exits 1 with one line per problem.
import argparse
import pathlib
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


# --- proto ---------------------------------------------------------------------------------------

def _tokens(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    # Strings, identifiers (dotted), numbers, and single punctuation characters.
    return re.findall(r'"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_.]*|-?\d+(?:\.\d*)?|\S', text)


class Proto:
    """What a set of .proto files defines: messages (name -> [field names]), enums (name ->
    [value names]) and RPCs (name -> (request, reply, client_streams, server_streams))."""

    def __init__(self):
        self.messages, self.enums, self.rpcs = {}, {}, {}

    def parse(self, text):
        self._toks, self._i = _tokens(text), 0
        while self._i < len(self._toks):
            self._top()

    def _next(self):
        tok = self._toks[self._i]
        self._i += 1
        return tok

    def _skip_statement(self):  # up to and including ';', or a balanced {...} block
        depth = 0
        while True:
            tok = self._next()
            if tok == "{":
                depth += 1
            elif tok == "}":
                depth -= 1
                if depth == 0:
                    return
            elif tok == ";" and depth == 0:
                return

    def _top(self):
        tok = self._toks[self._i]
        if tok == "message":
            self._message()
        elif tok == "enum":
            self._enum()
        elif tok == "service":
            self._service()
        elif tok == ";":
            self._i += 1
        else:  # syntax, package, import, option, extend
            self._skip_statement()

    def _message(self):
        self._next()
        name = self._next()
        fields = self.messages.setdefault(name, [])
        assert self._next() == "{", name
        while self._toks[self._i] != "}":
            tok = self._toks[self._i]
            if tok == "message":
                self._message()
            elif tok == "enum":
                self._enum()
            elif tok == "oneof":
                self._i += 2
                assert self._next() == "{"
                while self._toks[self._i] != "}":
                    self._field(fields)
                self._i += 1
            elif tok in ("option", "reserved", "extensions", "extend"):
                self._skip_statement()
            elif tok == ";":
                self._i += 1
            else:
                self._field(fields)
        self._i += 1

    def _field(self, fields):
        start = self._i
        while self._toks[self._i] != "=":
            self._i += 1
        fields.append(self._toks[self._i - 1])  # [label] type name = number [options];
        self._i = start
        self._skip_statement()

    def _enum(self):
        self._next()
        name = self._next()
        values = self.enums.setdefault(name, [])
        assert self._next() == "{", name
        while self._toks[self._i] != "}":
            tok = self._toks[self._i]
            if tok in ("option", "reserved"):
                self._skip_statement()
            elif tok == ";":
                self._i += 1
            else:
                values.append(tok)
                self._skip_statement()
        self._i += 1

    def _service(self):
        self._next()
        self._next()
        assert self._next() == "{"
        while self._toks[self._i] != "}":
            if self._toks[self._i] != "rpc":
                self._skip_statement()
                continue
            self._next()
            name = self._next()
            sides = []
            for _ in range(2):
                while self._toks[self._i] != "(":
                    self._i += 1
                self._i += 1
                stream = self._toks[self._i] == "stream"
                if stream:
                    self._i += 1
                sides.append((self._next().split(".")[-1], stream))
                assert self._next() == ")"
            self.rpcs[name] = (sides[0][0], sides[1][0], sides[0][1], sides[1][1])
            self._skip_statement()  # ';' or an options block
        self._i += 1


# --- markdown ------------------------------------------------------------------------------------

class Section:
    def __init__(self, level, title, line):
        self.level, self.title, self.line = level, title, line
        self.lines = []  # the heading's own lines, up to the next heading of any level
        self.children = []

    def text(self):  # the whole section, subsections included
        return "\n".join(self.lines + [c.text() for c in self.children])


def parse_markdown(text):
    root = Section(0, "", 0)
    stack = [root]
    fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^(#{1,6})\s+(.*)$", line)
        if m:
            section = Section(len(m.group(1)), m.group(2).strip(), number)
            while stack[-1].level >= section.level:
                stack.pop()
            stack[-1].children.append(section)
            stack.append(section)
        else:
            stack[-1].lines.append(line)
    return root


def walk(section):
    yield section
    for child in section.children:
        yield from walk(child)


def backticked(text):
    return re.findall(r"`([^`\n]+)`", text)


def tables(section):
    """The tables directly under a heading: (first line number unknown) lists of rows of cells."""
    out, rows = [], []
    for line in section.lines + [""]:
        if line.lstrip().startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows:
            out.append(rows)
            rows = []
    return out


# --- checks --------------------------------------------------------------------------------------

def check(proto, doc, flags):
    problems = []
    root = parse_markdown(doc)
    sections = list(walk(root))[1:]
    types = set(proto.messages) | set(proto.enums)

    def where(s):
        return f"docs/api.md:{s.line} ({s.title!r})"

    def named(s):
        return set(re.findall(IDENT, s.title)) & types

    # Messages and enums: a heading names each; its fields / values appear in those sections.
    for kind, table in (("message", proto.messages), ("enum", proto.enums)):
        for name, members in sorted(table.items()):
            homes = [s for s in sections if name in named(s)]
            if not homes:
                problems.append(f"{kind} {name}: no heading of docs/api.md names it")
                continue
            mentioned = {b.strip() for s in homes for b in backticked(s.text())}
            for member in members:
                if member not in mentioned:
                    problems.append(
                        f"{kind} {name}: `{member}` does not appear (in backticks) under "
                        + ", ".join(where(s) for s in homes))

    # Tables: field / value / rpc tables name only what exists.
    rpc_rows = {}
    for s in sections:
        for rows in tables(s):
            header = rows[0][0].strip("` ").lower()
            body = [r for r in rows[1:] if r]
            if header == "field" and named(s) & set(proto.messages):
                allowed = {f for m in named(s) & set(proto.messages) for f in proto.messages[m]}
                for r in body:
                    for name in re.findall(r"`(" + IDENT + r")`", r[0]):
                        if name not in allowed:
                            problems.append(f"{where(s)}: field table names `{name}`, which "
                                            f"{' / '.join(sorted(named(s)))} lacks")
            elif header == "field":
                problems.append(f"{where(s)}: a field table under a heading that names no message")
            elif header == "value":
                allowed = {v for e in named(s) & set(proto.enums) for v in proto.enums[e]}
                if not allowed:
                    problems.append(f"{where(s)}: a value table under a heading that names no enum")
                for r in body:
                    for name in re.findall(r"`(" + IDENT + r")`", r[0]):
                        if name not in allowed:
                            problems.append(f"{where(s)}: value table names `{name}`, which "
                                            f"{' / '.join(sorted(named(s)))} lacks")
            elif header == "rpc":
                for r in body:
                    names = re.findall(r"`(" + IDENT + r")`", r[0])
                    if len(names) != 1 or len(r) < 3:
                        problems.append(f"{where(s)}: rpc row {r[0]!r} is not `Name` | request | reply")
                        continue
                    rpc_rows[names[0]] = (s, r[1], r[2])
    for name, (req, rep, req_stream, rep_stream) in sorted(proto.rpcs.items()):
        if name not in rpc_rows:
            problems.append(f"rpc {name}: not in the service table (a table headed `rpc`)")
            continue
        s, req_cell, rep_cell = rpc_rows.pop(name)
        want_req = ("stream " if req_stream else "") + req
        want_rep = ("stream " if rep_stream else "") + rep
        if req_cell.strip("` ") != want_req or rep_cell.strip("` ") != want_rep:
            problems.append(f"{where(s)}: rpc {name} is documented as {req_cell} -> {rep_cell}; "
                            f"the proto says {want_req} -> {want_rep}")
    for name, (s, _, _) in sorted(rpc_rows.items()):
        problems.append(f"{where(s)}: the service table lists rpc {name}, which the proto lacks")

    # Type names in headings and `Type.field` references resolve.
    known = types | set(proto.rpcs)
    for s in sections:
        for b in backticked(s.title):
            if re.fullmatch(r"[A-Z][a-z][A-Za-z0-9]*", b) and b not in known:
                problems.append(f"{where(s)}: heading names `{b}`, which the proto lacks")
    for number, line in enumerate(doc.splitlines(), 1):
        for b in backticked(line):
            for t, f in re.findall(r"\b([A-Z][a-z][A-Za-z0-9]*)\.(" + IDENT + r")", b):
                if t in proto.messages and f not in proto.messages[t]:
                    problems.append(f"docs/api.md:{number}: `{t}.{f}`: {t} has no field {f}")
                elif t not in proto.messages and t not in proto.enums:
                    problems.append(f"docs/api.md:{number}: `{t}.{f}`: no message {t}")
        for flag in re.findall(r"--([a-z][a-z0-9_]*)", line):
            if flag not in flags:
                problems.append(f"docs/api.md:{number}: --{flag} is not a flag of server/config.cc")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parents[2],
                        type=pathlib.Path)
    args = parser.parse_args()
    proto = Proto()
    files = sorted((args.root / "proto/matserve/v1").glob("*.proto"))
    for path in files:
        proto.parse(path.read_text())
    if not proto.messages or not proto.rpcs:
        sys.exit(f"no messages or RPCs parsed from {[str(f) for f in files]}")
    flags = set(re.findall(r"ABSL_FLAG\(\s*[\w:]+\s*,\s*(\w+)",
                           (args.root / "server/config.cc").read_text()))
    problems = check(proto, (args.root / "docs/api.md").read_text(), flags)
    for p in problems:
        print(p)
    if problems:
        print(f"\n{len(problems)} disagreements between docs/api.md and "
              f"{', '.join(f.name for f in files)}: docs/api.md's rules are at the top of "
              f"tests/docs/check_api_doc.py")
        return 1
    print(f"docs/api.md agrees with the proto: {len(proto.rpcs)} RPCs, {len(proto.messages)} "
          f"messages, {len(proto.enums)} enums")
    return 0


if __name__ == "__main__":
    sys.exit(main())
