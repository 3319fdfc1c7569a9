"""The gate verdict as JUnit XML: one testcase per gate, which every CI system renders as a test report.

GitHub (via a JUnit action), GitLab (``artifacts:reports:junit``) and Jenkins read the same shape:
``<testsuites><testsuite><testcase classname name><failure message/></testcase>``. No ``time`` or
``timestamp`` attributes, so the report of two identical runs is the same bytes.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from hbtool.release.gates import GateReport


def render_junit(report: "GateReport", suite: str = "hbtool.gates") -> bytes:
    failures = report.failures
    root = ET.Element("testsuites", name=suite, tests=str(len(report.results)), failures=str(len(failures)), errors="0")
    ts = ET.SubElement(root, "testsuite", name=f"{suite}.{report.model}", tests=str(len(report.results)),
                       failures=str(len(failures)), errors="0", skipped="0")
    for r in report.results:
        case = ET.SubElement(ts, "testcase", classname=f"{suite}.{report.model}", name=r.key)
        if not r.passed:
            failure = ET.SubElement(case, "failure", message=r.line(), type="GateFailed")
            failure.text = f"limit {r.limit}, measured {r.measured}: {r.detail}"
        else:
            out = ET.SubElement(case, "system-out")
            out.text = r.line()
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
