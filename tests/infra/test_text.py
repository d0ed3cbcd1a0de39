"""Text a model controls (folder and tensor names, messages, config values) through every report format: whatever it
holds (arbitrary Unicode, control characters, ``|``, HTML, newlines, workflow commands), JUnit stays well-formed XML,
SARIF stays JSON that keeps the text, each GitHub line stays one command the text cannot end, and a Markdown row stays
one row. Issue 35, item 3."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadguard._infra.text import cell, visible
from loadguard.formats import Row, render_rows
from loadguard.formats.github import summary
from loadguard.report import Finding

HOSTILE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40) | st.sampled_from(
    [
        "\n::error::owned",
        "x\r\n::stop-commands::abc",
        "\x1b[2J\x1b]0;title\x07",
        "<script>alert(1)</script>",
        "a|b|c\n| x |",
        "\x00\x08\x0b\x0c\x1b",
        "\u2028\u0085",
    ]
)


def _rows(model: str, tensor: str, detail: str, error: str) -> list[Row]:
    finding = Finding(
        f"layer.{tensor}",
        "buffer",
        "non_persistent_buffer",
        "uninitialized",
        "float32",
        (1,),
        "cpu",
        detail,
        location=f"{tensor}.py:3",
    )
    return [Row(model, "C", findings=(finding,)), Row.failed(model + "-2", error, detail)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE, HOSTILE, HOSTILE, HOSTILE)
def test_every_report_format_survives_text_a_model_controls(model, tensor, detail, error):
    rows = _rows(model, tensor, detail, error)
    # JUnit: well-formed XML, a case per model, the names there (escaped, never dropped)
    tree = ET.fromstring(render_rows("junit", rows).split("\n", 1)[1])
    cases = tree.findall(".//testcase")
    assert [c.get("name") for c in cases] == [visible(model), visible(model + "-2")]
    # SARIF: JSON that keeps the model's text as data
    assert json.loads(render_rows("sarif", rows))["runs"]
    # GitHub: one command per line, each a single ::error the text cannot end or start anew
    lines = render_rows("github", rows).split("\n")
    assert len(lines) == 2 and all(line.startswith("::error ") for line in lines)
    for line in lines:  # the properties end at the first "::" (every ':' in them is encoded); the message is the rest
        head, separator, _ = line[2:].partition("::")
        assert separator and head.startswith("error ") and ":" not in head
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for line in lines for c in line)
    # the step summary's Markdown: the header, the rule, then exactly one row per model, each with its 3 cells
    table = summary(rows, "audit").rstrip("\n").split("\n")
    assert len(table) == 4 + len(rows)
    for row in table[4:]:
        assert row.startswith("| ") and row.endswith(" |") and len(row.replace("\\|", "").split("|")) == 5
        # a code span shows its text: nothing in it is markup (an escaped backtick, \`, opens none)
        outside = re.sub(r"(?<![\\`])(`+)(?!`).*?(?<!`)\1(?!`)", "", row)
        assert "<" not in outside and ">" not in outside


@given(HOSTILE)
def test_a_markdown_cell_is_one_line_with_no_tag_and_no_cell_break(text):
    out = cell(text)
    assert "\n" not in out and "\r" not in out and "<" not in out and ">" not in out
    assert "|" not in out.replace("\\|", "")
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in out)


def test_control_characters_are_shown_not_acted_on():
    assert visible("a\x1b[2Jb\nc\x00\u0085") == "a\\x1b[2Jb\\nc\\x00\\x85"
    assert visible("tab\there", keep="\t") == "tab\there"
    assert cell("<b>x|y</b>\n") == "&lt;b&gt;x\\|y&lt;/b&gt;\\\\n"
