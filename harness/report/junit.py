"""One ``junit.xml`` for the run: pytest's own per-phase JUnit files merged, runner starts as properties.

Each phase's ``<testsuite>`` is kept as pytest wrote it (renamed to the phase), so CI test views keep
working; a runner start is attached to the test case that owned it, found through the same node id →
classname/name mapping pytest's junitxml uses.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from _pytest.junitxml import bin_xml_escape, mangle_test_address

from harness.failures import PROPERTY as CLASS_PROPERTY
from harness.ledger.records import seconds
from harness.report.schema import Record, Rerun, TestResult

START_PROPERTY = "harness.runner-start"


def merge(
    junit_dir: Path,
    records: Iterable[Record],
    tests: Iterable[TestResult] = (),
    redact: Callable[[str], str] = str,
    reruns: Iterable[Rerun] = (),
) -> str:
    """The merged JUnit XML text of every ``<phase>.xml`` (and a resumed phase's ``<phase>+N.xml``) in
    ``junit_dir``; a test pytest could not write (its process died) is added from the ledger; a test run
    again carries its tries that do not count (``reruns``) as surefire's ``flakyFailure`` (it passed in
    the end) or ``rerunFailure`` (it did not), the shape Buildkite Test Analytics and GitHub's test
    reporters read. Every text and attribute goes through ``redact``: pytest's failure texts may carry a
    credential. Each failed or errored test case carries exactly one ``failure_class`` property, the
    ledger's where pytest wrote none (a crashed process's test, a ledger-rebuilt one)."""
    tests = list(tests)
    classes = {(t["phase"], *case_key(t["nodeid"])): t.get("failure_class") for t in tests}
    by_case: dict[tuple[str | None, str, str], list[Record]] = {}
    for record in records:
        if test := record.get("test"):
            by_case.setdefault((record["phase"], *case_key(test)), []).append(record)
    tries: dict[tuple[str | None, str, str], list[Rerun]] = {}
    for rerun in reruns:
        tries.setdefault((rerun.get("phase"), *case_key(rerun["test"])), []).append(rerun)

    root = ET.Element("testsuites", name="harness")
    for path in sorted(Path(junit_dir).glob("*.xml")) if Path(junit_dir).is_dir() else []:
        phase = path.stem.partition("+")[0]
        for suite in _suites(path):
            suite.set("name", phase)
            _last_try_only(suite, phase, tries)
            for case in suite.iter("testcase"):
                key = (phase, case.get("classname", ""), case.get("name", ""))
                if key in by_case:
                    _add_properties(case, by_case[key])
                if key in tries:
                    _add_reruns(case, tries[key])
                _one_class(case, classes.get(key))
            root.append(suite)
    _add_missing(root, tests)
    _clean(root, redact)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def redacted(junit_dir: Path, redact: Callable[[str], str]) -> Iterator[tuple[Path, str]]:
    """Each of pytest's own JUnit files in ``junit_dir`` that carries what ``redact`` takes out, and its
    text without it; a file that does not parse (a killed phase's) is redacted as text."""
    for path in sorted(Path(junit_dir).glob("*.xml")) if Path(junit_dir).is_dir() else []:
        original = path.read_text(encoding="utf-8", errors="replace")
        try:
            root = ET.fromstring(original)
        except ET.ParseError:
            if redact(original) != original:
                yield path, redact(original)
            continue
        strings = [s for e in root.iter() for s in (e.text, e.tail, *e.attrib.values()) if s]
        if any(redact(string) != string for string in strings):
            _clean(root, redact)
            yield path, ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _clean(root: ET.Element, redact: Callable[[str], str]) -> None:
    """Every text and attribute of the tree redacted, and in characters XML 1.0 allows: an ANSI escape or
    another control character (in a test id, a message, a model name) as pytest's junitxml writes it
    (``#x1B``). ElementTree writes them as they are, which no XML parser reads back."""
    for element in root.iter():
        if element.text:
            element.text = str(bin_xml_escape(redact(element.text)))
        if element.tail:
            element.tail = str(bin_xml_escape(redact(element.tail)))
        for name, value in element.attrib.items():
            element.set(name, str(bin_xml_escape(redact(value))))


def case_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) of the ``<testcase>`` pytest's junitxml writes for ``nodeid``."""
    names = mangle_test_address(nodeid)
    return ".".join(names[:-1]), names[-1]


def describe(record: Record) -> str:
    """A runner start in one line, as a property value and a tooltip."""
    startup = record.get("startup_s")
    seconds = f"{startup:.2f}s" if startup is not None else "?"
    owner = f"fixture {record['fixture']} ({record.get('scope')})" if record.get("fixture") else "test body"
    return (
        f"{record['kind']} {record['model']} [{record.get('fingerprint')}] {record['outcome']} "
        f"startup {seconds} by {owner} on {record.get('worker')} id {record['id']}"
    )


def _suites(path: Path) -> list[ET.Element]:
    """The ``<testsuite>`` elements of one file; an unreadable file (a killed phase) becomes an
    empty suite that says why, so the merge never loses the phases that did finish."""
    try:
        top = ET.parse(path).getroot()
    except ET.ParseError as error:
        broken = ET.Element("testsuite", name=path.stem, tests="0", errors="1")
        properties = ET.SubElement(broken, "properties")
        ET.SubElement(properties, "property", name="harness.error", value=f"{path.name} unreadable: {error}")
        return [broken]
    return [top] if top.tag == "testsuite" else list(top.iter("testsuite"))


def _add_missing(root: ET.Element, tests: list[TestResult]) -> None:
    """Ledger tests absent from pytest's files (its process died before writing one: a crash in a
    serial phase), each in a ``<testsuite>`` of its phase; a crashed one as an error saying how."""
    written = {
        (suite.get("name"), case.get("classname", ""), case.get("name", ""))
        for suite in root.iter("testsuite")
        for case in suite.iter("testcase")
    }
    for test in tests:
        classname, name = case_key(test["nodeid"])
        if (test["phase"], classname, name) in written:
            continue
        suite = next((s for s in root.iter("testsuite") if s.get("name") == test["phase"]), None)
        if suite is None:
            suite = ET.SubElement(root, "testsuite", name=test["phase"] or "")
        took = seconds(test)  # the one rule for a test's seconds
        case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{took:.3f}")
        tag = {"failed": "failure", "error": "error", "skipped": "skipped"}.get(test["outcome"])
        counter = {"failure": "failures", "error": "errors", "skipped": "skipped"}.get(tag or "")
        if tag:
            message = test.get("crash") or f"{test['outcome']} (from the harness ledger)"
            ET.SubElement(case, tag, message=message).text = message
        _one_class(case, test.get("failure_class"))
        for count in ("tests", counter or ""):
            if count:
                suite.set(count, str(int(suite.get(count) or 0) + 1))


def _last_try_only(suite: ET.Element, phase: str, tries: dict) -> None:
    """One test case per test: pytest's junitxml writes one per pytest-rerunfailures try, so a test run
    again keeps its last (the result; its other tries are its ``flakyFailure``/``rerunFailure``)."""
    last = {(phase, *key): case for case in suite.findall("testcase") for key in [_case_key(case)]}
    for case in suite.findall("testcase"):
        key = (phase, *_case_key(case))
        if key in tries and last[key] is not case:
            suite.remove(case)


def _case_key(case: ET.Element) -> tuple[str, str]:
    return case.get("classname", ""), case.get("name", "")


def _one_class(case: ET.Element, ledger: str | None) -> None:
    """A ``case`` with at most one ``failure_class`` property: pytest's first, else the ledger's (``ledger``:
    a failed or errored test's, or a quarantined failure's, its xfail, which pytest never saw where its
    process died); a test the ledger gives no class keeps what pytest wrote."""
    properties = case.find("properties")
    given = [] if properties is None else [p for p in properties if p.get("name") == CLASS_PROPERTY]
    for extra in given[1:]:
        properties.remove(extra)  # type: ignore[union-attr]
    if given or ledger is None:
        return
    if properties is None:
        properties = ET.Element("properties")
        case.insert(0, properties)
    ET.SubElement(properties, "property", name=CLASS_PROPERTY, value=ledger)


def _add_properties(case: ET.Element, records: list[Record]) -> None:
    properties = case.find("properties")
    if properties is None:
        properties = ET.Element("properties")
        case.insert(0, properties)
    for record in records:
        ET.SubElement(properties, "property", name=START_PROPERTY, value=describe(record))


def _add_reruns(case: ET.Element, reruns: list[Rerun]) -> None:
    """Each failed try of ``case`` that is not its result, in surefire's shape: ``flakyFailure`` (or
    ``flakyError``) when the test passed in the end, else ``rerunFailure`` (``rerunError``); the first
    try's from any record (``first_*``), a later one's from its own. A property says why each try ran."""
    counts = reruns[0]["counts"]
    passed = reruns[0]["result"] == "passed"
    first = reruns[0]
    failed = [(1, first["first_outcome"], first["first_message"], first["first_longrepr"])]
    failed += [(r["attempt"], r["outcome"], r["message"], r["longrepr"]) for r in reruns]
    for attempt, outcome, message, text in failed:
        if attempt == counts or outcome not in ("failed", "error"):
            continue
        kind = ("flaky" if passed else "rerun") + ("Failure" if outcome == "failed" else "Error")
        element = ET.SubElement(case, kind, message=message or outcome, type=outcome)
        ET.SubElement(element, "stackTrace").text = text or message or outcome
    properties = case.find("properties")
    if properties is None:
        properties = ET.Element("properties")
        case.insert(0, properties)
    for rerun in reruns:
        ET.SubElement(
            properties,
            "property",
            name="harness.rerun",
            value=f"try {rerun['attempt']} ({rerun['policy']}): {rerun['why']}; {rerun['outcome']}"
            + (f"; {rerun['verdict']}" if rerun.get("verdict") else ""),
        )
