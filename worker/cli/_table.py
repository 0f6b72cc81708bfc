"""Tables of requests fitted to the terminal (`askq requests`, the pending requests of
`askq status`).

A row of eight fields does not fit 80 columns once the 32-character id is whole, and
rich shrinks every column to fit, down to one letter each: three requests took 89
lines. So a table is printed one line per request when that fits without cutting
anything (a wide terminal, or `--wide`: no width limit); otherwise each request takes
two lines, every field under a named column, cut with an ellipsis where it is too
long (the id never is: it is what an operator copies into `askq show`).

Every cell is agent text shown as data (`visible`: control characters written out),
never markup.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..protocol._text import visible

INDENT = "  "  # the second line of a row, under the first
MIN_WIDTH = 8  # a cut column keeps at least this much of its text


def fitted_table(
    title: str,
    order: Sequence[str],
    pairs: Sequence[tuple[str, str | None]],
    rows: Sequence[Mapping[str, str]],
    console: Any,
    *,
    whole: Collection[str],
    caption: str | None = None,
) -> Any:
    """The rows (field -> text) as one line each in `order` when that fits the
    console's width, else as two lines each: the `pairs` are the columns, the first
    field on the first line, the second under it. The `whole` fields (names and ids
    to act on) are never cut."""
    table = _one_line(title, order, rows)
    if _width(console, table) > console.width:
        table = _two_lines(title, pairs, rows, console, whole)
    if caption:  # under the table, as wide as the screen (not the table)
        from rich.console import Group
        from rich.text import Text

        return Group(table, Text(caption))
    return table


def _width(console: Any, table: Any) -> int:
    """The width the table takes with nothing cut or wrapped."""
    from rich.measure import Measurement

    unbounded = console.options.update_width(1_000_000)
    return Measurement.get(console, unbounded, table).maximum


def _table(title: str, **options: Any) -> Any:
    from rich.table import Table

    return Table(title=title, title_justify="left", **options)


def _one_line(title: str, order: Sequence[str], rows: Sequence[Mapping[str, str]]) -> Any:
    from rich.text import Text

    table = _table(title)
    for name in order:
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    for row in rows:
        table.add_row(*[Text(visible(row[name])) for name in order])
    return table


def _two_lines(
    title: str,
    pairs: Sequence[tuple[str, str | None]],
    rows: Sequence[Mapping[str, str]],
    console: Any,
    whole: Collection[str],
) -> Any:
    from rich import box
    from rich.cells import cell_len
    from rich.text import Text

    def heading(top: str, under: str | None) -> str:
        return top if under is None else f"{top}\n{INDENT}{under}"

    def cell(row: Mapping[str, str], top: str, under: str | None) -> Text:
        text = Text(visible(row[top]))
        if under is not None:
            text.append("\n" + INDENT)
            text.append(visible(row[under]), style="dim")
        return text

    def widest(texts: list[str]) -> int:
        return max(cell_len(line) for text in texts for line in text.split("\n"))

    natural, least = [], []
    for top, under in pairs:
        texts = [heading(top, under)] + [cell(row, top, under).plain for row in rows]
        natural.append(widest(texts))
        if top in whole or under in whole:  # as wide as its longest value: never cut
            tops = [visible(row[top]) for row in rows] if top in whole else []
            below = under if under in whole else None
            unders = [INDENT + visible(row[below]) for row in rows] if below else []
            least.append(widest([heading(top, under), *tops, *unders]))
        else:
            least.append(min(natural[-1], max(widest([heading(top, under)]), MIN_WIDTH)))

    def build(widths: list[int]) -> Any:
        table = _table(
            title, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True
        )
        for (top, under), width in zip(pairs, widths, strict=True):
            table.add_column(heading(top, under), width=width, no_wrap=True, overflow="ellipsis")
        return table

    room = console.width - (_width(console, build([1] * len(pairs))) - len(pairs))
    widths = natural if sum(natural) <= room else _shared(natural, least, room)
    table = build(widths)
    for row in rows:
        table.add_row(*[cell(row, top, under) for top, under in pairs])
    return table


def _shared(natural: list[int], least: list[int], room: int) -> list[int]:
    """Column widths within `room`: each its minimum, then what is left shared out
    evenly, a column that needs less than its share taking only what it needs (so a
    short state is never cut to lengthen a long agent id)."""
    widths = list(least)
    spare = room - sum(least)
    wanting = sorted(
        (i for i in range(len(natural)) if natural[i] > least[i]),
        key=lambda i: natural[i] - least[i],
    )
    while wanting and spare > 0:
        share = spare // len(wanting)
        need = natural[wanting[0]] - widths[wanting[0]]
        if need <= share:
            widths[wanting.pop(0)] += need
            spare -= need
            continue
        for n, i in enumerate(wanting):
            widths[i] += share + (1 if n < spare - share * len(wanting) else 0)
        break
    return widths
