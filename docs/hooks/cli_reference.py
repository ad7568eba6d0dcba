"""MkDocs hook: the command-line reference, generated from the typer app.

A page that holds the line ``<!-- legalize-cli-reference -->`` gets, in its place,
what typer's own documentation generator (``typer ... utils docs``) makes of
``legalizer.cli.app``: the usage line, the arguments and every option with its help,
metavar and default. The command's help text is written with click's ``\\b`` markers
(a paragraph not to be rewrapped); those paragraphs become preformatted blocks, as
``--help`` shows them.
"""

from __future__ import annotations

MARKER = "<!-- legalize-cli-reference -->"


def _description(help_text: str) -> str:
    out = []
    for paragraph in help_text.strip().split("\n\n"):
        if paragraph.startswith("\b\n"):
            out.append("```text\n" + paragraph[2:].rstrip() + "\n```")
        else:
            out.append(" ".join(paragraph.split()))
    return "\n\n".join(out)


def reference() -> str:
    import typer.main
    from typer.cli import get_docs_for_click

    from legalizer.cli import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="legalize")
    docs = get_docs_for_click(obj=command, ctx=ctx, name="legalize")
    # typer's text of the help (rewrapped, \b dropped) is replaced by the help as written.
    _, sep, rest = docs.partition("**Usage**:")
    if not sep:
        raise RuntimeError("typer's generated docs have no **Usage** section")
    return _description(command.help or "") + "\n\n**Usage**:" + rest


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' signature)
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, reference())
    return markdown
