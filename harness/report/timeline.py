"""``timeline.svg`` and ``report.html``: the run as a picture, so two engines alive on one device show.

One lane per worker and device; a bar per runner lifetime (the start-up part darker) labelled with its
model and owner; phases as background bands; the device's used memory, as the ledger sampled it at each
start and stop, as a line across the lane. Runners whose lifetimes overlap on one device are drawn red.
Every bar is a ``<g>`` with ``id`` and ``data-runner`` so tests and people can find a record's bar.
Hand-written SVG (xml.etree) keeps the dependency list empty.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.platform.base import GIB
from harness.report.junit import describe
from harness.report.schema import Phase, Record, Report, Sample

WIDTH = 1400
LEFT = 230  # lane labels
RIGHT = 30
TOP = 50  # phase names and axis
ROW = 26  # one row of bars
MEMORY = 36  # memory strip under a lane's bars
GAP = 10
COLOURS = {"vllm": ("#9ec5fe", "#3d8bfd"), "hf": ("#a3cfbb", "#479f76")}
OVERLAP = ("#f1aeb5", "#dc3545")
BANDS = ("#f8f9fa", "#eef1f4")


def svg(report: Report) -> str:
    """The timeline SVG text of a report."""
    records = _closed(report)
    start, end = _extent(report, records)
    span = max(end - start, 1e-6)

    def x(t: float) -> float:
        return LEFT + (t - start) / span * (WIDTH - LEFT - RIGHT)

    lanes: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        lanes.setdefault(_lane(record), []).append(record)
    heights = {lane: len(_rows(members, end)) * ROW + MEMORY for lane, members in lanes.items()}
    height = TOP + sum(h + GAP for h in heights.values()) + 40
    root = _canvas(report, height)
    _phase_bands(root, report["phases"], x, height)
    _axis(root, start, span, x, height)
    pairs = overlaps(records, end)
    totals = {d["uuid"]: d.get("total_bytes") for d in report["devices"]}
    y = TOP + 6
    for (worker, device), members in lanes.items():
        lane = ET.SubElement(root, "g", {"class": "lane", "data-worker": worker, "data-device": device})
        _lane_bars(lane, (worker, device), members, pairs, x, y, end)
        first = device.split(",")[0]
        memory_y = y + heights[(worker, device)] - MEMORY
        _memory(lane, records, report.get("samples", []), first, totals.get(first), x, memory_y)
        y += heights[(worker, device)] + GAP
    _legend(root, height)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


def _closed(report: Report) -> list[Record]:
    """The records by start; a runner never stopped died with its phase's processes at the latest, so
    it ends with its phase and later phases do not overlap it."""
    ends = {}
    for phase in report["phases"]:
        started, wall = phase.get("started"), phase.get("wall_s")
        if started is not None and wall is not None:
            ends[phase["name"]] = started + wall

    def closed(record: Record) -> Record:
        end = ends.get(record["phase"] or "")
        if record["outcome"] == "never-stopped" and record.get("stop") is None and end is not None:
            return {**record, "stop": end}
        return record

    return sorted((closed(r) for r in report["records"]), key=lambda r: r["start"])


def _canvas(report: Report, height: float) -> ET.Element:
    root = ET.Element(
        "svg",
        xmlns="http://www.w3.org/2000/svg",
        width=str(WIDTH),
        height=str(height),
        viewBox=f"0 0 {WIDTH} {height}",
        style="font-family: sans-serif; font-size: 11px",
    )
    ET.SubElement(root, "rect", width=str(WIDTH), height=str(height), fill="white")
    title = f"{report.get('suite') or 'run'} on {report['platform'].get('name') or '?'}"
    ET.SubElement(root, "text", x="8", y="18", style="font-size: 14px; font-weight: bold").text = title
    return root


def _phase_bands(root: ET.Element, phases: list[Phase], x, height: float) -> None:
    for index, phase in enumerate(phases):
        started, wall = phase.get("started"), phase.get("wall_s")
        if started is None or wall is None:
            continue
        left, right = x(started), x(started + wall)
        band = ET.SubElement(root, "g", {"class": "phase", "data-phase": phase["name"]})
        ET.SubElement(
            band, "rect", x=_n(left), y=str(TOP - 14), width=_n(right - left), height=str(height - TOP - 10)
        ).set("fill", BANDS[index % 2])
        ET.SubElement(
            band, "text", x=_n(left + 4), y=str(TOP - 2), fill="#6c757d"
        ).text = f"phase {phase['name']}"


def _lane_bars(lane: ET.Element, key: tuple[str, str], members: list[Record], pairs, x, y: float, end: float):
    """One lane's label, its runners' bars packed in rows, and bands where two were alive at once."""
    worker, device = key
    overlapping = {id(r) for a, b, _, _ in pairs for r in (a, b)}
    ET.SubElement(
        lane, "line", x1="0", x2=str(WIDTH), y1=_n(y - GAP / 2), y2=_n(y - GAP / 2), stroke="#dee2e6"
    )
    ET.SubElement(lane, "text", x="8", y=_n(y + 14), style="font-weight: bold").text = worker
    ET.SubElement(lane, "text", x="8", y=_n(y + 28), fill="#6c757d").text = _short(device, 34)
    rows = _rows(members, end)
    for row, row_members in enumerate(rows):
        for record in row_members:
            _bar(lane, record, x, y + row * ROW, end, id(record) in overlapping)
    for a, b, both_start, both_end in pairs:
        if set(device.split(",")) & set(a.get("devices") or []):
            _overlap_band(lane, a, b, x(both_start), x(both_end), y, len(rows) * ROW)


def _legend(root: ET.Element, height: float) -> None:
    legend = ET.SubElement(root, "g", {"class": "legend"})
    items = [
        ("vLLM engine", COLOURS["vllm"][1]),
        ("HF model", COLOURS["hf"][1]),
        ("overlap on one device", OVERLAP[1]),
    ]
    for i, (label, colour) in enumerate(items):
        lx = LEFT + i * 190
        ET.SubElement(legend, "rect", x=str(lx), y=_n(height - 24), width="14", height="10", fill=colour)
        ET.SubElement(legend, "text", x=str(lx + 20), y=_n(height - 15)).text = label
    ET.SubElement(
        legend, "text", x=str(LEFT + 3 * 190), y=_n(height - 15), fill="#6f42c1"
    ).text = "— used device memory"


def lifetime(record: Record, end: float) -> tuple[float, float]:
    """When a runner held its device: start to stop, to the end of start-up when it failed, to the end
    of the run when it was never stopped."""
    stop = record.get("stop")
    if stop is not None:
        return record["start"], stop
    if record["outcome"] in ("failed", "blocked"):
        return record["start"], record["start"] + (record.get("startup_s") or 0.0)
    return record["start"], end


def overlaps(records: list[Record], end: float) -> list[tuple[Record, Record, float, float]]:
    """Pairs of runners alive at once on a shared device, with the interval they were both alive."""
    found = []
    for i, a in enumerate(records):
        a_start, a_end = lifetime(a, end)
        for b in records[i + 1 :]:
            b_start, b_end = lifetime(b, end)
            if (
                set(a.get("devices") or []) & set(b.get("devices") or [])
                and a_start < b_end
                and b_start < a_end
            ):
                found.append((a, b, max(a_start, b_start), min(a_end, b_end)))
    return found


def _extent(report: Report, records: list[Record]) -> tuple[float, float]:
    times = [r["start"] for r in records] + [stop for r in records if (stop := r.get("stop")) is not None]
    times += [r["start"] + (r.get("startup_s") or 0.0) for r in records]
    for phase in report["phases"]:
        if (started := phase.get("started")) is not None:
            times += [started, started + (phase.get("wall_s") or 0.0)]
    times += [t["t"] for t in report["tests"] if t.get("t") is not None]
    return (min(times), max(times)) if times else (0.0, 1.0)


def _lane(record: Record) -> tuple[str, str]:
    return str(record.get("worker")), ",".join(record.get("devices") or ["?"])


def _rows(members: list[Record], end: float) -> list[list[Record]]:
    """Greedy interval packing: runners alive at once go on separate rows of the lane."""
    rows: list[list[Record]] = []
    for record in members:
        start = lifetime(record, end)[0]
        for row in rows:
            if lifetime(row[-1], end)[1] <= start:
                row.append(record)
                break
        else:
            rows.append([record])
    return rows or [[]]


def _bar(lane: ET.Element, record: Record, x, y: float, end: float, overlap: bool) -> None:
    start, stop = lifetime(record, end)
    light, dark = OVERLAP if overlap else COLOURS.get(record["kind"], ("#dee2e6", "#6c757d"))
    classes = " ".join(["runner", record["kind"], record["outcome"], *(["overlap"] if overlap else [])])
    group = ET.SubElement(
        lane,
        "g",
        {
            "id": f"runner-{record['phase']}-{record['id']}",
            "class": classes,
            "data-runner": record["id"],
            "data-phase": str(record["phase"]),
            "data-test": str(record.get("test")),
            "data-model": str(record["model"]),
        },
    )
    ET.SubElement(group, "title").text = f"{describe(record)}\ntest {record.get('test')}"
    left, width = x(start), max(x(stop) - x(start), 2.0)
    rect = ET.SubElement(group, "rect", x=_n(left), y=_n(y + 2), width=_n(width), height=str(ROW - 6), rx="3")
    rect.set("fill", light)
    rect.set("stroke", dark)
    if overlap:
        rect.set("stroke-width", "2")
    if record["outcome"] == "never-stopped":
        rect.set("stroke-dasharray", "5 3")
    startup = min(x(start + (record.get("startup_s") or 0.0)), left + width) - left
    ET.SubElement(
        group, "rect", x=_n(left), y=_n(y + 2), width=_n(max(startup, 1.0)), height=str(ROW - 6)
    ).set("fill", dark)
    owner = record.get("fixture") or (record.get("test") or "?").split("::")[-1]
    label = _short(f"{_model_name(record['model'])} · {owner}", int(width / 6.2))
    if label:
        ET.SubElement(group, "text", x=_n(left + 4), y=_n(y + ROW / 2 + 4)).text = label


def _overlap_band(lane: ET.Element, a: Record, b: Record, left: float, right: float, y: float, height: float):
    band = ET.SubElement(lane, "g", {"class": "overlap-band", "data-runners": f"{a['id']} {b['id']}"})
    ET.SubElement(band, "title").text = (
        f"{a['id']} ({a['model']}, {a.get('fixture') or a.get('test')}) and {b['id']} ({b['model']}, "
        f"{b.get('fixture') or b.get('test')}) alive at once on {', '.join(a.get('devices') or [])}"
    )
    rect = ET.SubElement(
        band, "rect", x=_n(left), y=_n(y), width=_n(max(right - left, 2.0)), height=_n(height)
    )
    rect.set("fill", OVERLAP[1])
    rect.set("fill-opacity", "0.12")
    if right - left >= 60:  # narrower overlaps keep the tooltip only, labels would collide
        ET.SubElement(band, "text", x=_n(left + 3), y=_n(y + height + 11), fill=OVERLAP[1]).text = "⚠ 2 alive"


def _model_name(model: str) -> str:
    """``org/name`` → ``name``; a local path keeps its last two parts (``.../minilm/model``)."""
    parts = model.rstrip("/").split("/")
    return "/".join(parts[-2:]) if model.startswith(("/", ".")) else parts[-1]


def _memory(lane: ET.Element, records: list[Record], sampled: list[Sample], device: str, total, x, y) -> None:
    """Used memory of the lane's device, as a step line: the readings at each runner start and stop, and
    the background sampler's (any worker's)."""
    samples = [(s["t"], s["used"][device]) for s in sampled if s.get("used", {}).get(device) is not None]
    for record in records:
        for t, reading in (
            (record["start"], record.get("mem_before")),
            (record["start"] + (record.get("startup_s") or 0.0), record.get("mem_after_start")),
            (record.get("stop"), record.get("mem_after_stop")),
        ):
            if t is not None and isinstance(reading, dict) and reading.get(device) is not None:
                samples.append((t, reading[device]))
    if not samples:
        return
    samples.sort()
    top = total or max(used for _, used in samples) or 1
    points, previous = [], None
    for t, used in samples:
        py = y + MEMORY - 4 - used / top * (MEMORY - 8)
        if previous is not None:
            points.append(f"{_n(x(t))},{_n(previous)}")
        points.append(f"{_n(x(t))},{_n(py)}")
        previous = py
    group = ET.SubElement(lane, "g", {"class": "memory", "data-device": device})
    ET.SubElement(group, "polyline", points=" ".join(points), fill="none", stroke="#6f42c1").set(
        "stroke-width", "1.5"
    )
    peak = max(used for _, used in samples)
    scale = f"{peak / GIB:.1f}" + (f" / {total / GIB:.0f} GiB" if total else " GiB peak")
    ET.SubElement(group, "text", x="8", y=_n(y + MEMORY - 6), fill="#6f42c1").text = f"mem {scale}"


def _axis(root: ET.Element, start: float, span: float, x, height: float) -> None:
    step = next(
        (s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600) if span / s <= 12), 7200
    )
    axis = ET.SubElement(root, "g", {"class": "axis"})
    tick = 0.0
    while tick <= span:
        left = _n(x(start + tick))
        ET.SubElement(axis, "line", x1=left, x2=left, y1=str(TOP - 10), y2=_n(height - 34), stroke="#e9ecef")
        label = f"{tick:.0f} s" if step < 60 else f"{tick / 60:.0f} min"
        ET.SubElement(axis, "text", x=left, y=_n(height - 30), fill="#6c757d").text = label
        tick += step


def _short(text: str, chars: int) -> str:
    if chars < 4:
        return ""
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _n(value: float) -> str:
    return f"{value:.1f}"
