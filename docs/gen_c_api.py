"""The C API reference page, made from the public headers' own comments.

    python docs/gen_c_api.py [OUT.md]      # the page on stdout, or into OUT.md

The documentation build calls ``render()`` through ``docs/hooks.py``, so the
page is never written into the source tree and never committed: the headers
stay the one place each declaration is described. Every declaration there
states ownership and thread safety in the comment right above it; this
script keeps each comment with the code below it, in the headers' order, and
refuses (``HeaderError``) a ``nxhal_*`` function or a function-table entry
that has no comment, so a function can neither go undocumented nor drop out
of the page unnoticed.

It reads the text, not the C grammar: comments, preprocessor lines and
statements ending in ``;`` at brace depth 0 are all it needs to tell apart,
and it needs no C preprocessor or compiler (pycparser would need the headers
preprocessed, which drops the comments this page is made of).
"""

from __future__ import annotations

import html
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "include" / "nx_hal"
HEADERS = ("nx_hal.h", "nx_hal_loader.h")
PAGE = "reference/c-api.md"

# Statements and directives that carry no API of their own.
_SKIPPED_DIRECTIVE = re.compile(r"#\s*(if|ifdef|ifndef|elif|else|endif|include|undef|error|pragma)\b")
_ENTRY_LIST = re.compile(r"#\s*define\s+(NXHAL_API_\w*ENTRIES\w*)\s*\(X,\s*P\)")
_FUNCTION = re.compile(r"\b(nxhal_\w+)\s*\(")
_FUNCTION_POINTER = re.compile(r"\(\s*\*\s*(nxhal_\w+)\s*\)\s*\(")
_DEFINE = re.compile(r"#\s*define\s+(\w+)")
_TYPEDEF_NAME = re.compile(r"\b(\w+)\s*;\s*$")
_DASHES = re.compile(r"^-{3,}")
_GUARD = re.compile(r"#\s*define\s+NX_HAL_\w+_H_\s*$")


class HeaderError(ValueError):
    """A header the page cannot be made from faithfully (a function without its comment)."""


@dataclass
class Token:
    """One comment, preprocessor directive or statement of a header."""

    kind: str  # "comment", "directive" or "statement"
    text: str
    line: int
    blank_before: bool  # an empty line separates it from the token before
    trailing: str = ""  # a comment on the same line after a statement


@dataclass
class Entry:
    """One declaration on the page: its heading ids, its code and its comment."""

    names: list[str]
    code: str
    comment: str
    since: str = ""


@dataclass
class Section:
    """A heading and what stands below it, in the header's order: prose
    (Markdown) and entries."""

    title: str
    items: list[str | Entry] = field(default_factory=list)

    @property
    def entries(self) -> list[Entry]:
        return [item for item in self.items if isinstance(item, Entry)]


def _skip_comment(text: str, i: int) -> int:
    end = text.find("*/", i + 2)
    if end < 0:
        raise HeaderError(f"unterminated comment at offset {i}")
    return end + 2


def _statement_end(text: str, i: int) -> int:
    """The offset just past the ';' that ends the statement starting at i
    (braces, comments and string literals skipped)."""
    depth = 0
    while i < len(text):
        if text.startswith("/*", i):
            i = _skip_comment(text, i)
            continue
        char = text[i]
        if char == '"':
            i = text.index('"', i + 1) + 1
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == ";" and depth == 0:
            return i + 1
        i += 1
    raise HeaderError("a statement has no ';'")


def _directive_end(text: str, i: int) -> int:
    """The offset of the newline ending a directive (backslash continuations joined)."""
    while True:
        end = text.find("\n", i)
        if end < 0:
            return len(text)
        if text[end - 1] != "\\":
            return end
        i = end + 1


def tokens(text: str) -> Iterator[Token]:
    """Splits a header into comments, directives and statements, in order."""
    i, last_end = 0, 0
    while True:
        match = re.compile(r"\S").search(text, i)
        if match is None:
            return
        start = match.start()
        gap = text[last_end:start]
        blank = gap.count("\n") >= 2
        line = text.count("\n", 0, start) + 1
        if text.startswith("/*", start):
            end = _skip_comment(text, start)
            yield Token("comment", text[start:end], line, blank)
        elif text[start] == "#":
            end = _directive_end(text, start)
            yield Token("directive", text[start:end], line, blank)
        elif re.match(r'extern\s+"C"\s*\{', text[start:]) or text[start] == "}":
            # The C++ linkage block's own braces: no declaration of their own.
            end = text.index("{" if text[start] != "}" else "}", start) + 1
            comment = re.match(r"[ \t]*/\*.*?\*/", text[end:])
            end += comment.end() if comment else 0
        else:
            end = _statement_end(text, start)
            trailing = re.match(r"[ \t]*(/\*.*?\*/)", text[end:])
            yield Token("statement", text[start:end], line, blank, trailing.group(1) if trailing else "")
            if trailing:
                end += trailing.end()
        i = last_end = end


def comment_text(comment: str) -> str:
    """A comment's text without its delimiters, leading stars and common indent."""
    body = comment.strip()
    body = body[2:-2] if body.startswith("/*") and body.endswith("*/") else body
    lines = [re.sub(r"^\s*\*?(?: |$)", "", line.rstrip().rstrip("\\").rstrip()) for line in body.split("\n")]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return "\n".join(line[cut:] for line in lines)


def _inline(text: str) -> str:
    """Comment prose made safe for Markdown: what the headers mean literally
    (``<name>``, ``*out``, ``[/lib]``) must not become HTML, emphasis or links.
    Backtick spans are kept as code."""
    parts = re.split(r"(`[^`\n]*`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(part)
            continue
        part = html.escape(part, quote=False)
        out.append(re.sub(r"([\\*_\[\]#|])", r"\\\1", part))
    return "".join(out)


def markdown(text: str) -> str:
    """A cleaned comment as Markdown: paragraphs, '- ' lists, indented lines as code."""
    blocks: list[str] = []
    paragraph: list[str] = []
    items: list[list[str]] = []
    code: list[str] = []

    def flush() -> None:
        if paragraph:
            blocks.append(_inline(" ".join(paragraph)))
            paragraph.clear()
        if items:
            blocks.append("\n".join(f"- {_inline(' '.join(item))}" for item in items))
            items.clear()
        if code:
            blocks.append("```text\n" + "\n".join(code) + "\n```")
            code.clear()

    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            flush()
        elif stripped.startswith("- "):
            if paragraph or code:
                flush()
            items.append([stripped[2:]])
        elif items and line.startswith(" "):
            items[-1].append(stripped)
        elif line.startswith("  ") and not paragraph:
            if items:
                flush()
            code.append(line[2:])
        else:
            if items or code:
                flush()
            paragraph.append(stripped)
    flush()
    return "\n\n".join(blocks)


def _since(comment: str) -> tuple[str, str]:
    """The comment without its ``\\since X.Y`` marks, and the first version named."""
    found = re.findall(r"\\since\s+(\d+\.\d+)", comment)
    return re.sub(r"\s*\\since\s+\d+\.\d+\.?", "", comment).strip(), (found[0] if found else "")


def _entries_of_list(directive: str) -> Iterator[Entry]:
    """The function-table entries of an X-macro list: each X(...) with the comment above it."""
    body = directive.split("\n", 1)[1] if "\n" in directive else ""
    body = "\n".join(line.rstrip().rstrip("\\") for line in body.split("\n"))
    i, comment = 0, ""
    while True:
        match = re.compile(r"/\*|\bX\(").search(body, i)
        if match is None:
            return
        if match.group() == "/*":
            end = _skip_comment(body, match.start())
            comment = comment_text(body[match.start():end])
            i = end
            continue
        depth, j = 0, match.end() - 1
        while True:
            depth += {"(": 1, ")": -1}.get(body[j], 0)
            j += 1
            if depth == 0:
                break
        inner = " ".join(body[match.end():j - 1].split())
        ret, rest = inner.split(",", 1)
        name, rest = rest.strip().split(",", 1)
        params = rest[:rest.rindex(")") + 1].strip()
        major, minor = re.findall(r"\d+", rest[rest.rindex(")"):])[:2]
        params = re.sub(r"\s*\*\s*\*", "**", params)
        text, _ = _since(comment)
        if not text:
            raise HeaderError(f"function-table entry '{name}' has no comment")
        yield Entry([f"api->{name}"], f"{ret.strip()} (*{name}){params};", text, f"{major}.{minor}")
        comment, i = "", j


def _names(token: Token) -> list[str]:
    """What a statement or directive declares, for its heading (empty: nothing worth one)."""
    text = token.text
    if token.kind == "directive":
        match = _DEFINE.match(text)
        return [match.group(1)] if match else []
    if text.startswith("NXHAL_STATIC_ASSERT"):
        return []
    pointer = _FUNCTION_POINTER.search(text)
    if pointer:
        return [pointer.group(1)]
    if text.startswith("typedef"):
        match = _TYPEDEF_NAME.search(text)
        return [match.group(1)] if match else []
    match = _FUNCTION.search(text)
    return [match.group(1)] if match else []


def _title(comment: str) -> str | None:
    """A section title: the text of a banner comment between dashed lines,
    or the first line of a ``--- Title ---`` comment."""
    first = comment.split("\n", 1)[0].strip()
    if _DASHES.match(first):
        title = first.strip("- ").strip()
        return title or None
    return None


def sections(header: str) -> list[Section]:
    """The header's declarations and prose, under its own section banners, in order."""
    parts = list(tokens((INCLUDE / header).read_text()))
    result = [Section(header)]
    pending: str | None = None  # the last comment, until what it describes is known
    group: Entry | None = None  # declarations written together share one comment

    def flush() -> None:
        """The pending comment stands alone: prose in the page."""
        nonlocal pending
        if pending is not None:
            result[-1].items.append(markdown(pending))
            pending = None

    for n, token in enumerate(parts):
        if token.kind == "comment":
            body = comment_text(token.text)
            group = None
            if n == 0:  # the file's own comment: what the header is
                result[0].items.append(markdown(body))
                continue
            if _DASHES.fullmatch(body.strip()) or body.strip().startswith("clang-format"):
                continue  # a banner's rule, a formatter's switch
            flush()
            title = _banner_title(parts, n) or _title(body)
            if title:
                result.append(Section(title))
                rest = body.split("\n", 1)[1] if _title(body) and "\n" in body else ""
                if rest.strip():
                    result[-1].items.append(markdown(rest))
                continue
            pending = body
            continue
        if token.kind == "directive":
            if _ENTRY_LIST.match(token.text) and re.search(r"\bX\(", token.text):
                flush()
                result[-1].items.extend(_entries_of_list(token.text))
                group = None
                continue
            if _SKIPPED_DIRECTIVE.match(token.text) or _GUARD.match(token.text):
                continue
        names = _names(token)
        code = token.text + (f" {token.trailing}" if token.trailing else "")
        if group is not None and not token.blank_before and pending is None:
            group.names += [name for name in names if name not in group.names]
            group.code += "\n" + code
            continue
        if not names or token.blank_before:
            flush()  # a comment a blank line away describes no one declaration
        if not names:
            group = None
            continue
        comment, since = _since(pending or "")
        pending = None
        group = Entry(names, code, comment, since)
        result[-1].items.append(group)
    flush()
    return [s for s in result if s.items]


def _banner_title(parts: list[Token], n: int) -> str | None:
    """The text of comment n when it stands between two dashed rules (a section banner)."""
    def rule(k: int) -> bool:
        return 0 <= k < len(parts) and parts[k].kind == "comment" and bool(
            _DASHES.fullmatch(comment_text(parts[k].text).strip()))

    return comment_text(parts[n].text).strip() if rule(n - 1) and rule(n + 1) else None


def _declared_functions(header: str) -> set[str]:
    """Every ``nxhal_*`` function and function-table entry a header declares,
    found independently of the parser above (comments stripped, then
    declarations at the start of a statement): what the page must hold."""
    code = re.sub(r"/\*.*?\*/", " ", (INCLUDE / header).read_text(), flags=re.S)
    entries = {f"api->{name}" for name in re.findall(r"\bX\(\s*[^,()]+\s*,\s*(\w+)\s*,", code)}
    code = re.sub(r"(?m)^\s*#.*(?:\\\n.*)*$", " ", code)
    functions = set(re.findall(r"(?:^|;)\s*(?!typedef)[\w\s]*?[\w*]\s*\**\s*\b(nxhal_\w+)\s*\([^;{]*\)\s*;", code, re.M))
    pointers = set(re.findall(r"typedef[^;]*\(\s*\*\s*(nxhal_\w+)\s*\)", code))
    return entries | functions | pointers


def check(header: str, found: list[Section]) -> None:
    """Raises HeaderError unless every function the header declares is on the page with its comment."""
    documented = {name for s in found for e in s.entries if e.comment.strip() for name in e.names}
    missing = sorted(_declared_functions(header) - documented)
    if missing:
        raise HeaderError(f"{header}: no comment (or not found) for {', '.join(missing)}")


def _anchor(name: str) -> str:
    return name.replace("->", "-")


def render() -> str:
    """The whole page, as Markdown."""
    out = [
        "# C API reference",
        "",
        "Made from the comments of `include/nx_hal/nx_hal.h` (the plugin ABI) and "
        "`include/nx_hal/nx_hal_loader.h` (loading plugins from C and C++) by `docs/gen_c_api.py` "
        "when the documentation is built: the headers are the source, and each declaration says who owns "
        "what and which calls are thread-safe. A plugin's functions are reached through its table, "
        "`api->name(...)`; the loader's are plain functions. The C++ API, `include/nx_hal/nx_hal.hpp`, "
        "wraps both (see [the C++ quickstart](../quickstart-cpp.md)); what a version may change is in "
        "[ABI and versioning](../abi.md).",
        "",
    ]
    for header in HEADERS:
        found = sections(header)
        check(header, found)
        for n, section in enumerate(found):
            level = "##" if n == 0 else "###"
            title = f"`{section.title}`" if n == 0 else _inline(section.title)
            out += [f"{level} {title}", ""]
            for item in section.items:
                if isinstance(item, str):
                    out += [item, ""]
                    continue
                entry = item
                heading = ", ".join(f"`{name}`" for name in entry.names)
                out += [f"#### {heading} {{#{_anchor(entry.names[0])}}}", ""]
                out += ["```c", entry.code, "```", ""]
                if entry.comment:
                    out += [markdown(entry.comment), ""]
                if entry.since:
                    out += [f"*Since ABI {entry.since}.*", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    page = render()
    if len(argv) > 1:
        Path(argv[1]).write_text(page)
    else:
        sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
