"""LOADGUARD_FIX.md, the text a maintainer pastes as a pull request, rendered as CommonMark with GFM tables: whatever
the model controls (tensor and file names, the lines of its code in the diff, the reasons that quote it) shows as text;
nothing renders as a link, an image, HTML, a mention or a fence of its own. Issue 45, class 3."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadguard._fix import FixResult, notes
from loadguard._fix.plan import Change, Refusal
from loadguard._fix.proofs import Proof
from loadguard._infra.text import visible
from loadguard.report import ChangeKind, Finding, FixStatus

from ..infra.test_markdown import HOSTILE, MD, _dead


def _result(name: str, text: str, diff: str) -> FixResult:
    finding = Finding(
        name, "buffer", "non_persistent_buffer", "uninitialized", "float32", (1,), "cpu", text, location=f"{name}.py:3"
    )
    return FixResult(
        model=name,
        out="out",
        status=FixStatus.PARTLY,
        findings=(finding,),
        workarounds=(name,),
        changes=(Change(f"{name}.py", ChangeKind.RECOMPUTE, f"recomputes {name} in _init_weights", (name,)),),
        refused=(Refusal(name, "uninitialized", f"{text} is not in a method of a class", f"{name}.py:{text}"),),
        proofs=(Proof("loads_right", "5.25.0", True, f"{name} bit-identical: {text}"),),
        diff=diff,
        versions={"transformers": "5.25.0"},
        upstream=diff,
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE, HOSTILE, st.lists(HOSTILE, max_size=5))
def test_the_pull_request_text_renders_only_what_loadguard_wrote(name, text, code_lines):
    # each of the model's lines one line of the diff (a diff line never holds a newline: it is where lines split)
    code_lines = [line.replace("\n", " ") for line in code_lines]
    diff = "\n".join(["--- a/m.py", "+++ b/m.py", "@@ -1 +1 @@", *(f"+{line}" for line in code_lines)])
    tokens = MD.parse(notes(_result(name, text, diff)))
    _dead(tokens, ours=("em_open", "em_close"))  # the closing "_Written by loadguard fix_" line
    fences = [t for t in tokens if t.type == "fence"]
    assert [f.info for f in fences] == ["python", "diff", "diff"]  # the reproduction, the change, upstream: no more
    shown = "\n".join(visible(line, keep="\t") for line in diff.split("\n")) + "\n"
    assert fences[1].content == shown and fences[2].content == shown
    compile(fences[0].content, "reproduction", "exec")  # the model's names are string literals in it, never code
    headings = [t.tag for t in tokens if t.type == "heading_open"]
    assert headings == ["h1"] + ["h2"] * 8  # loadguard's own sections, none of the model's


def test_a_docstring_line_of_backticks_stays_in_the_diff():
    diff = '--- a/m.py\n+++ b/m.py\n@@ -1 +1,3 @@\n+"""\n+```\n+![p](http://e.example/p.png) @octocat\n'
    text = notes(_result("pos_embed", "x", diff))
    assert "````diff\n" in text
    tokens = MD.parse(text)
    _dead(tokens, ours=("em_open", "em_close"))
    assert "@octocat" in [t for t in tokens if t.type == "fence"][1].content  # the change, after the reproduction
