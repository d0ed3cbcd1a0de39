"""Markdown a model's strings go into renders as those strings and nothing else, checked by rendering it with a
CommonMark parser (markdown-it-py, with GFM tables) under hypothesis: a code span or a fence no backtick inside can
close, prose with no link, image, HTML, emphasis, mention or bare address left live. Issue 45, class 3."""

from __future__ import annotations

import html
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from loadguard._infra.text import cell, code, fence, inert, visible

MD = MarkdownIt("commonmark").enable("table")
HOSTILE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60) | st.sampled_from(
    [
        "x`y` ![p](http://e.example/p.png) @octocat",
        "```\n![img](http://evil.example)\n```",
        "<!-- hidden --> <img src=x> &amp; &#64;",
        "\x1b]8;;http://e.example\x07link\x1b]8;;\x07",
        "\n::error file=x::owned",
        "[text](https://e.example) www.e.example a@b.example *em* _em_ ~~s~~ $x$",
        "`` ` ``` ```` ",
        " leading and trailing ",
        "a|b\\|c",
    ]
)
LIVE = re.compile(r"(?<!\w)@\w|://|www\.|\w@\w+\.\w")
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _inline(tokens) -> list:
    return [child for token in tokens if token.type == "inline" for child in token.children]


def _dead(tokens, ours: tuple[str, ...] = ()) -> None:
    """Nothing in ``tokens`` renders as anything but text and code (and ``ours``, the markup of loadguard's own
    layout): no link, image, HTML, emphasis; and no text a GitHub page would link or notify (an address, ``@name``)
    outside a code span."""
    for token in tokens:
        assert token.type not in ("html_block", "html_inline"), token
    for child in _inline(tokens):
        assert child.type in ("text", "code_inline", "softbreak", *ours), child
        if child.type == "text":
            assert not LIVE.search(child.content), child.content


@SETTINGS
@given(HOSTILE)
def test_a_code_span_holds_the_text_and_nothing_closes_it(text):
    for table in (False, True):
        source = f"| h |\n|---|\n| {code(text, table=True)} |" if table else f"see {code(text)} here"
        spans = [c for c in _inline(MD.parse(source)) if c.type == "code_inline"]
        assert [s.content for s in spans] == [visible(text) or " "], source
        _dead(MD.parse(source))


@SETTINGS
@given(HOSTILE)
def test_prose_renders_as_itself(text):
    source = f"why: {inert(text)}"
    tokens = MD.parse(source)
    _dead(tokens)
    shown = "".join(c.content for c in _inline(tokens))
    assert shown == f"why: {visible(text)}".rstrip()  # a paragraph ends at its last non-space
    row = MD.parse(f"| a | b |\n|---|---|\n| {cell(text)} | x |")
    assert [t.type for t in row].count("td_open") == 2  # one row, its two cells: nothing in the text ended one
    _dead(row)


@SETTINGS
@given(st.lists(HOSTILE, max_size=6))
def test_a_fence_ends_where_it_was_meant_to(lines):
    text = "\n".join(lines)
    tokens = MD.parse(f"{fence(text, 'diff')}\n\nafter {inert('@octocat')}")
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1 and fences[0].info == "diff"
    assert fences[0].content == "\n".join(visible(line, keep="\t") for line in text.split("\n")) + "\n"
    _dead(tokens)


def test_what_the_escapes_look_like():
    assert code("a`b") == "``a`b``" and code("`x") == "`` `x ``" and code("a|b", table=True) == "`a\\|b`"
    assert inert("![p](u) @octocat") == "\\!\\[p\\](u) `@octocat`"
    assert html.unescape(MD.render(inert("<b>x</b>"))) == "<p><b>x</b></p>\n"  # shown, as text
    assert fence("```\nx").startswith("````diff"[:4] + "\n```\nx")
