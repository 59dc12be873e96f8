"""run.md read back as a CommonMark parser with tables reads it: its table rows and its
headings."""

from __future__ import annotations

from markdown_it import MarkdownIt

from tests.projections.builders import RUN

MD = MarkdownIt("commonmark").enable("table")


def table_rows(markdown: str) -> list[list[str]]:
    """Every table row (header rows included) as parsed by a CommonMark+tables parser."""
    rows: list[list[str]] = []
    current: list[str] | None = None
    for token in MD.parse(markdown):
        if token.type == "tr_open":
            current = []
        elif token.type == "inline" and current is not None:
            current.append(token.content)
        elif token.type == "tr_close" and current is not None:
            rows.append(current)
            current = None
    return rows


def headings(markdown: str) -> list[str]:
    tokens = MD.parse(markdown)
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


REPORT_HEADINGS = [
    f"Run {RUN}", "Summary", "Variants", "Tasks", "Tokens and cost", "Drift since the run started",
    "Skipped task files", "Environment",
]
