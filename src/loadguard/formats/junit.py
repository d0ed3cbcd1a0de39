"""JUnit XML (what CI test reports read): a fleet is a test case per model; one model is a test case per check, a
check that did not run being skipped with the reason; a run (``compare``, ``trace``) is one test case, failing with what
the run did wrong and the tensors behind it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .._infra import xml
from ._rows import Row


def _failure_text(findings) -> str:
    return "\n".join(
        xml(f"{f.tensor} ({f.status}): {f.detail}" + (f" [at {f.location}]" if f.location else "")) for f in findings
    )


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", {"classname": xml(classname), "name": xml(name)})


def emit(rows: list[Row], *, command: str = "audit") -> str:
    root = ET.Element("testsuites", {"name": xml(f"loadguard {command}")})
    suite = ET.SubElement(root, "testsuite", {"name": xml(f"loadguard {command}")})
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    single = len(rows) == 1 and rows[0].checked and rows[0].mode in ("audit", "scan")
    for row in rows:
        if single:  # one model: a case per check
            for check in row.checks:
                counts["tests"] += 1
                case = _case(suite, row.model, check.check)
                failed = [f for f in row.failures if f.check == check.check]
                if not check.ran:
                    counts["skipped"] += 1
                    ET.SubElement(case, "skipped", {"message": xml(check.reason)})
                elif failed:
                    counts["failures"] += 1
                    ET.SubElement(
                        case, "failure", {"message": f"{len(failed)} tensor(s) wrong", "type": check.check}
                    ).text = _failure_text(failed)
            continue
        counts["tests"] += 1
        case = _case(suite, f"loadguard.{command}", row.model)
        if not row.checked:
            counts["errors"] += 1
            ET.SubElement(case, "error", {"message": xml(row.error or ""), "type": "could not check"}).text = xml(
                row.hint or ""
            )
        elif row.run_failure is not None:
            counts["failures"] += 1
            text = xml(row.run_failure.message) + ("\n" + _failure_text(row.failures) if row.failures else "")
            first = row.run_failure.message.splitlines()[0] if row.run_failure.message else ""
            ET.SubElement(case, "failure", {"message": xml(first), "type": xml(row.run_failure.kind)}).text = text
        elif row.failures:
            counts["failures"] += 1
            ET.SubElement(
                case, "failure", {"message": f"{len(row.failures)} tensor(s) wrong", "type": "findings"}
            ).text = _failure_text(row.failures)
    for element in (root, suite):
        element.attrib.update({k: str(v) for k, v in counts.items()})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")


__all__ = ["emit"]
