"""rooflab's NVML reading against a real recording of NVML and nvidia-smi at one moment
(tests/fixtures/nvml/, written by tests/fixtures/nvml/record.py on a GPU machine).

Until a recording is there the tests that read it skip, naming the command that records it. The
recorder's own refusals and its read-only, every-call coverage are tested here without a GPU.
ROOFLAB_NVML_FIXTURES=<folder> points the tests at another recording (the device check runs them
on the folder it has just written, before packing it).
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path

import pytest

from rooflab.conditions.nvml import (
    clock_event_reason_table,
    decode_clock_event_reasons,
    normalize_pci_bus_id,
)

REPO = Path(__file__).resolve().parents[1]
RECORDER = REPO / "tests" / "fixtures" / "nvml" / "record.py"
FIXTURES = Path(os.environ.get("ROOFLAB_NVML_FIXTURES") or REPO / "tests" / "fixtures" / "nvml")
RECORD_COMMAND = "python tests/fixtures/nvml/record.py tests/fixtures"
NOT_RECORDED = (
    f"NVML fixture not recorded yet: on an NVIDIA GPU machine run `{RECORD_COMMAND}` "
    "(or tests/gpu/device_check.sh's fixtures step, then `tar -xzf nvml.tar.gz -C tests/fixtures`)"
)
NVML_SOURCE = REPO / "src" / "rooflab" / "conditions" / "nvml.py"

# nvidia-smi's XML names a reason <clocks_event_reason_NAME> (older drivers:
# <clocks_throttle_reason_NAME>); NAME is rooflab's (pynvml's, snake_case) but for one plural.
XML_REASON_CONTAINERS = ("clocks_event_reasons", "clocks_throttle_reasons")
XML_REASON_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")
XML_REASON_ALIASES = {"display_clocks_setting": "display_clock_setting"}

SM, MEM = "NVML_CLOCK_SM", "NVML_CLOCK_MEM"
CALL_SM_CLOCK = f"nvmlDeviceGetClockInfo(device, {SM})"
CALL_MEM_CLOCK = f"nvmlDeviceGetClockInfo(device, {MEM})"
CALL_TEMP = "nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU)"
CALL_POWER = "nvmlDeviceGetPowerUsage(device)"
CALL_REASONS = "nvmlDeviceGetCurrentClocksEventReasons(device)"
CALL_SUPPORTED = "nvmlDeviceGetSupportedClocksEventReasons(device)"


def load_recorder():
    spec = importlib.util.spec_from_file_location("nvml_fixture_recorder", RECORDER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the recorder, without a GPU


def run_recorder(outdir: Path, path: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PATH"}
    env["PATH"] = path
    return subprocess.run(
        [sys.executable, str(RECORDER), str(outdir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_refused_cleanly(done: subprocess.CompletedProcess, outdir: Path, said: str) -> None:
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one clear line, no traceback
    assert said in lines[0] and "nothing recorded" in lines[0], lines[0]
    assert done.stdout == ""
    assert not (outdir / "nvml").exists()
    assert not outdir.exists() or list(outdir.iterdir()) == []  # no temporary folder left


def test_recorder_refuses_without_nvidia_smi(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    outdir = tmp_path / "out"
    done = run_recorder(outdir, str(empty))
    assert_refused_cleanly(done, outdir, "nvidia-smi is not on PATH")


def test_recorder_refuses_without_nvml(tmp_path):
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except Exception:
        pass
    else:
        pytest.skip("NVML works here: the recorder would record")
    stub = tmp_path / "bin" / "nvidia-smi"  # present on PATH, so the NVML check is reached
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 1\n")
    stub.chmod(0o755)
    outdir = tmp_path / "out"
    outdir.mkdir()
    done = run_recorder(outdir, str(stub.parent))
    assert_refused_cleanly(done, outdir, "NVML is unavailable")


def nvml_calls_in(source: str) -> tuple[set[str], set[str]]:
    """(nvml* functions called, NVML_* constants used) in rooflab's nvml.py."""
    functions, constants = set(), set()
    for node in ast.walk(ast.parse(source)):
        called = node.func if isinstance(node, ast.Call) else None
        if isinstance(called, ast.Attribute) and called.attr.startswith("nvml"):
            functions.add(called.attr)
        if isinstance(node, ast.Attribute) and node.attr.startswith("NVML_"):
            constants.add(node.attr)
        text = node.value if isinstance(node, ast.Constant) else None
        if isinstance(text, str) and re.fullmatch(r"NVML_[A-Z_]+", text):
            constants.add(text)  # getattr(nvml, "NVML_CLOCK_SM")
    return functions, constants


def test_recorder_records_every_call_rooflab_makes():
    recorder = load_recorder()
    functions, constants = nvml_calls_in(NVML_SOURCE.read_text())
    assert {"nvmlDeviceGetClockInfo", "nvmlDeviceGetEnforcedPowerLimit"} <= functions
    assert {SM, MEM, "NVML_TEMPERATURE_GPU"} <= constants
    calls = recorder.SYSTEM_CALLS + recorder.DEVICE_CALLS
    recorded = {name for name, _ in calls}
    recorded |= {"nvmlInit", "nvmlDeviceGetHandleByIndex"}  # open_nvml, Recorder.full_pass
    assert functions - recorded == set(), "rooflab calls NVML where the recorder does not"
    assert constants - {arg for _, args in calls for arg in args} == set()
    assert set(recorder.SAMPLED_CALLS) <= set(recorder.DEVICE_CALLS)
    pynvml = pytest.importorskip("pynvml")  # a misspelt name would be recorded as an error
    used = recorded | {arg for _, args in calls for arg in args} | {"nvmlSystemGetNVMLVersion"}
    assert sorted(name for name in used if not hasattr(pynvml, name)) == []


def test_recorder_is_read_only():
    recorder = load_recorder()
    names = set()  # every name, attribute and string in its code (not its prose)
    for node in ast.walk(ast.parse(RECORDER.read_text())):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    assert "nvmlDeviceGetClockInfo" in names
    assert [name for name in names if re.fullmatch(r"nvml\w*Set\w*", name)] == []
    read_only = {"-q", "-x", "-i", "{uuid}", "--format=csv"}
    for _, argv, _ in recorder.NVIDIA_SMI_COMMANDS:
        assert argv[0] == "nvidia-smi" and set(argv[1:]) <= read_only, argv
    for query in recorder.REASON_QUERIES:
        assert re.fullmatch(r"[a-z_.,]+", query) and "=" not in query


def test_recorder_keeps_raw_values():
    pynvml = pytest.importorskip("pynvml")
    recorder = load_recorder()
    pci = pynvml.nvmlPciInfo_t()
    pci.busId = b"00000000:3B:00.0"
    pci.domain, pci.bus = 0, 0x3B
    as_json = recorder.jsonable(pci)
    assert as_json["busId"] == "00000000:3B:00.0" and as_json["bus"] == 0x3B
    assert set(as_json) == {name for name, *_ in pci._fields_}
    assert recorder.jsonable([1, 0]) == [1, 0] and recorder.jsonable(0x1FF) == 0x1FF
    error = recorder.error_record(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED))
    assert error == {
        "text": "Not Supported",
        "value": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "class": "NVMLError_NotSupported",
    }


def test_readme_says_whether_anything_is_recorded():
    readme = FIXTURES / "README.md"
    if not readme.exists():
        pytest.skip(f"no {readme}")
    says_nothing = "Nothing is recorded yet" in readme.read_text()
    assert says_nothing != (FIXTURES / "nvml_raw.json").exists()


# ------------------------------------------------------------------------- reading a recording


@cache
def recording() -> dict:
    return {
        "raw": json.loads((FIXTURES / "nvml_raw.json").read_text()),
        "rooflab": json.loads((FIXTURES / "rooflab.json").read_text()),
        "commands": json.loads((FIXTURES / "commands.json").read_text())["commands"],
    }


@pytest.fixture
def rec() -> dict:
    if not (FIXTURES / "nvml_raw.json").exists():
        pytest.skip(NOT_RECORDED)
    return recording()


def entry(rec: dict, label: str, which: str = "before") -> dict:
    found = [call for call in rec["raw"][which]["calls"] if call["call"] == label]
    assert len(found) == 1, f"{label}: {len(found)} entries in pass {which}"
    return found[0]


def value(rec: dict, label: str, which: str = "before"):
    got = entry(rec, label, which)
    assert "error" not in got, f"{label}: {got['error']}"
    return got["return"]


def observed(rec: dict, label: str) -> list:
    """Every value NVML gave for `label` in the recording: before, sampled, after."""
    values = [entry(rec, label, "before").get("return")]
    values += [row[label] for row in rec["raw"]["samples"]]
    values.append(entry(rec, label, "after").get("return"))
    return [v for v in values if isinstance(v, int)]


@cache
def smi_gpu() -> ET.Element:
    root = ET.parse(FIXTURES / "nvidia-smi-q-x.xml").getroot()
    uuid = recording()["raw"]["context"]["uuid"]
    gpus = [gpu for gpu in root.findall("gpu") if gpu.findtext("uuid") == uuid]
    assert len(gpus) == 1, f"nvidia-smi -q -x lists {len(gpus)} GPUs with UUID {uuid}"
    return gpus[0]


def smi_root() -> ET.Element:
    return ET.parse(FIXTURES / "nvidia-smi-q-x.xml").getroot()


def smi_text(*paths: str) -> str:
    """The first of `paths` under the GPU's element that nvidia-smi wrote (names change with the
    driver)."""
    for path in paths:
        found = smi_gpu().find(path)
        if found is not None:
            return (found.text or "").strip()
    raise AssertionError(f"nvidia-smi -q -x has none of {paths}")


def smi_number(*paths: str) -> float | None:
    text = smi_text(*paths)
    return None if text == "N/A" else float(text.split()[0])


def assert_within(found: float, seen: list, slack: float, what: str) -> None:
    assert seen, f"{what}: NVML gave no value"
    low, high = min(seen) - slack, max(seen) + slack
    assert low <= found <= high, (
        f"{what}: {found} outside NVML's {min(seen)}..{max(seen)} ± {slack}"
    )


def feature(rec: dict, label: str, convert=lambda state: state) -> object:
    """What nvidia-smi writes for an NVML call: 'N/A' where NVML says Not Supported."""
    got = entry(rec, label)
    if "error" in got:
        return "N/A" if got["error"]["class"] == "NVMLError_NotSupported" else got["error"]["text"]
    return convert(got["return"])


def enabled(state: int) -> str:
    return {0: "Disabled", 1: "Enabled"}[state]


def xml_reasons() -> dict[str, bool]:
    """nvidia-smi's clock-event reasons, by rooflab's name: active or not."""
    for container in XML_REASON_CONTAINERS:
        element = smi_gpu().find(container)
        if element is not None:
            break
    else:
        raise AssertionError(f"nvidia-smi -q -x has none of {XML_REASON_CONTAINERS}")
    reasons = {}
    for child in element:
        name = child.tag
        for prefix in XML_REASON_PREFIXES:
            name = name.removeprefix(prefix)
        reasons[XML_REASON_ALIASES.get(name, name)] = (child.text or "").strip() == "Active"
    return reasons


# ------------------------------------------------------------------------------- provenance


def test_provenance_readme_and_commands(rec):
    readme = (FIXTURES / "README.md").read_text()
    context = rec["raw"]["context"]
    name = value(rec, "nvmlDeviceGetName(device)")
    driver = value(rec, "nvmlSystemGetDriverVersion()")
    for fact in (name, driver, context["uuid"], context["nvidia_ml_py_version"], "record.py"):
        assert fact in readme, fact
    assert context["began_utc"] in readme and "UTC" in readme and "host:" in readme
    by_file = {c["file"]: c for c in rec["commands"] if c["file"]}
    for file, flag in (("nvidia-smi-q.txt", "-q"), ("nvidia-smi-q-x.xml", "-x")):
        assert by_file[file]["exit_status"] == 0 and flag in by_file[file]["argv"]
        assert (FIXTURES / file).stat().st_size > 0
    text = (FIXTURES / "nvidia-smi-q.txt").read_text()
    assert re.search(rf"Driver Version\s*:\s*{re.escape(driver)}\s*$", text, re.M)
    assert re.search(rf"(GPU )?UUID\s*:\s*{re.escape(context['uuid'])}\s*$", text, re.M)


def test_readings_were_close_in_time(rec):
    raw = rec["raw"]
    xml = next(c for c in rec["commands"] if c["file"] == "nvidia-smi-q-x.xml")
    assert 0 <= xml["t_start_s"] - raw["before"]["t_end_s"] < 5
    assert 0 <= raw["after"]["t_start_s"] - xml["t_end_s"] < 5
    during = [r for r in raw["samples"] if xml["t_start_s"] <= r["t_s"] <= xml["t_end_s"]]
    assert during or xml["t_end_s"] - xml["t_start_s"] < 2 * raw["context"]["sample_period_s"]


# ------------------------------------------------------------------- NVML against nvidia-smi


def test_active_reasons_decode_as_nvidia_smi_lists_them(rec):
    listed = xml_reasons()
    active = {name for name, on in listed.items() if on}
    masks = observed(rec, CALL_REASONS)
    # nvidia-smi lists some reasons only (not board_limit, reliability): compare on those
    decoded = [set(decode_clock_event_reasons(mask)) & set(listed) for mask in masks]
    if len(set(masks)) == 1:  # the mask held still all through: one answer
        assert active == decoded[0], f"nvidia-smi {sorted(active)}, NVML mask {masks[0]:#x}"
    else:
        assert active in decoded, f"nvidia-smi {sorted(active)}, NVML masks {sorted(set(masks))}"


def test_nvidia_smi_reasons_are_rooflab_reasons(rec):
    known = set(clock_event_reason_table().values())
    listed = set(xml_reasons())
    assert listed and listed <= known, f"nvidia-smi names {sorted(listed - known)} unknown here"


def test_supported_reasons_all_have_names(rec):
    supported = value(rec, CALL_SUPPORTED)
    assert supported == value(rec, CALL_SUPPORTED, "after")
    names = decode_clock_event_reasons(supported)
    assert names and not [name for name in names if name.startswith("unknown_")], names
    for mask in observed(rec, CALL_REASONS):
        assert mask & ~supported == 0, f"current {mask:#x} outside supported {supported:#x}"


def test_reason_masks_agree_with_nvidia_smi_query(rec):
    query = next((c for c in rec["commands"] if c["file"] == "nvidia-smi-query-reasons.csv"), None)
    if query is None:
        pytest.skip("nvidia-smi answered neither reason query (see commands.json)")
    rows = list(csv.reader(io.StringIO((FIXTURES / query["file"]).read_text())))
    (uuid, supported, active), *_ = [[cell.strip() for cell in row] for row in rows[1:]]
    assert uuid == rec["raw"]["context"]["uuid"]
    assert int(supported, 16) == value(rec, CALL_SUPPORTED)
    assert int(active, 16) in observed(rec, CALL_REASONS)


def test_identity_agrees_exactly(rec):
    context = rec["raw"]["context"]
    root = smi_root()
    assert smi_text("uuid") == value(rec, "nvmlDeviceGetUUID(device)") == context["uuid"]
    assert smi_text("product_name") == value(rec, "nvmlDeviceGetName(device)")
    assert root.findtext("driver_version") == value(rec, "nvmlSystemGetDriverVersion()")
    cuda = value(rec, "nvmlSystemGetCudaDriverVersion()")
    assert root.findtext("cuda_version") == f"{cuda // 1000}.{cuda % 1000 // 10}"
    bus_id = value(rec, "nvmlDeviceGetPciInfo(device)")["busId"]
    assert normalize_pci_bus_id(smi_text("pci/pci_bus_id")) == normalize_pci_bus_id(bus_id)
    assert normalize_pci_bus_id(smi_gpu().get("id")) == normalize_pci_bus_id(context["pci_bus_id"])


def test_modes_agree_exactly(rec):
    assert smi_text("persistence_mode") == feature(
        rec, "nvmlDeviceGetPersistenceMode(device)", enabled
    )
    for call, element, prefix in (
        ("nvmlDeviceGetEccMode(device)", "ecc_mode", "ecc"),
        ("nvmlDeviceGetMigMode(device)", "mig_mode", "mig"),
    ):
        expected = feature(rec, call, lambda pair: [enabled(state) for state in pair])
        found = [smi_text(f"{element}/current_{prefix}"), smi_text(f"{element}/pending_{prefix}")]
        assert found == (expected if isinstance(expected, list) else [expected] * 2), call


def test_fixed_clocks_and_power_limit_agree_exactly(rec):
    # nvidia-smi's application clocks name the graphics clock; on this GPU NVML's SM clock is it
    for call, element in (
        ("nvmlDeviceGetMaxClockInfo", "max_clocks/{}"),
        ("nvmlDeviceGetApplicationsClock", "applications_clocks/{}"),
        ("nvmlDeviceGetDefaultApplicationsClock", "default_applications_clocks/{}"),
    ):
        sm_tag = "sm_clock" if call == "nvmlDeviceGetMaxClockInfo" else "graphics_clock"
        for clock, tag in ((SM, sm_tag), (MEM, "mem_clock")):
            expected = feature(rec, f"{call}(device, {clock})", lambda mhz: f"{mhz} MHz")
            assert smi_text(element.format(tag)) == expected, f"{call} {clock}"
    limit_w = value(rec, "nvmlDeviceGetEnforcedPowerLimit(device)") / 1000
    found = smi_number(
        "gpu_power_readings/current_power_limit",
        "power_readings/current_power_limit",
        "power_readings/enforced_power_limit",
    )
    assert found == pytest.approx(limit_w, abs=0.006), "W, as nvidia-smi rounds it (2 decimals)"


def test_changing_values_agree_within_the_recording(rec):
    for call, path in ((CALL_SM_CLOCK, "clocks/sm_clock"), (CALL_MEM_CLOCK, "clocks/mem_clock")):
        seen = observed(rec, call)
        assert_within(smi_number(path), seen, max(15, 0.01 * max(seen)), f"{call} MHz")
    assert_within(smi_number("temperature/gpu_temp"), observed(rec, CALL_TEMP), 1, "°C")
    # NVML's power usage is the 1 s average on Ampere and later (except GA100), which
    # nvidia-smi writes as average_power_draw (power_draw on older drivers)
    watts = [mw / 1000 for mw in observed(rec, CALL_POWER)]
    found = smi_number(
        "gpu_power_readings/average_power_draw",
        "gpu_power_readings/power_draw",
        "power_readings/average_power_draw",
        "power_readings/power_draw",
    )
    assert_within(found, watts, max(10, 0.1 * max(watts)), "power W")


def test_nvidia_smi_lists_only_processes_nvml_lists(rec):
    smi_pids = {int(pid.text) for pid in smi_gpu().findall("processes/process_info/pid")}
    nvml_pids = set()
    for which in ("before", "after"):
        for kind in ("Compute", "Graphics"):
            got = entry(rec, f"nvmlDeviceGet{kind}RunningProcesses(device)", which)
            nvml_pids |= {process["pid"] for process in got.get("return", [])}
    assert smi_pids <= nvml_pids


# ------------------------------------------------------------- rooflab's reading against NVML


def expected_static(rec: dict) -> dict:
    """rooflab's static_info, as its documented conversions give it from the raw values."""
    on = lambda state: state == 1  # noqa: E731 - NVML_FEATURE_ENABLED
    pair = lambda convert: lambda p: {"current": convert(p[0]), "pending": convert(p[1])}  # noqa: E731
    rules = {
        "nvml_name": ("nvmlDeviceGetName(device)", str),
        "nvml_uuid": ("nvmlDeviceGetUUID(device)", str),
        "driver_version": ("nvmlSystemGetDriverVersion()", str),
        "cuda_driver_version": ("nvmlSystemGetCudaDriverVersion()", int),
        "persistence_mode": ("nvmlDeviceGetPersistenceMode(device)", on),
        "ecc_mode": ("nvmlDeviceGetEccMode(device)", pair(on)),
        "mig_mode": ("nvmlDeviceGetMigMode(device)", pair(int)),
        "power_limit_w": ("nvmlDeviceGetEnforcedPowerLimit(device)", lambda mw: mw / 1000.0),
        "supported_clock_event_reasons": (CALL_SUPPORTED, decode_clock_event_reasons),
    }
    for clock, constant in (("sm", SM), ("mem", MEM)):
        for field, call in (
            ("applications_clock", "nvmlDeviceGetApplicationsClock"),
            ("default_applications_clock", "nvmlDeviceGetDefaultApplicationsClock"),
            ("max_clock", "nvmlDeviceGetMaxClockInfo"),
        ):
            rules[f"{field}_{clock}_mhz"] = (f"{call}(device, {constant})", int)
    expected = {}
    for field, (call, convert) in rules.items():
        got = entry(rec, call)
        assert got.get("return") == entry(rec, call, "after").get("return"), f"{call} changed"
        expected[field] = (
            ("error", got["error"]["text"]) if "error" in got else convert(got["return"])
        )
    return expected


def test_rooflab_static_info_is_the_raw_values(rec):
    ours = rec["rooflab"]
    assert ours["available"] and ours["error"] is None
    assert ours["pci_bus_id"] == rec["raw"]["context"]["pci_bus_id"]
    static = ours["static_info"]
    for field, expected in expected_static(rec).items():
        if isinstance(expected, tuple):  # NVML refused: rooflab says so, with NVML's words
            assert static[field] is None and expected[1] in static["unavailable"][field], field
        else:
            assert static[field] == expected, field
            assert field not in static["unavailable"], field
    assert set(static) - {"unavailable"} == set(expected_static(rec))


def test_rooflab_reading_is_within_the_raw_values(rec):
    reading = rec["rooflab"]["reading"]
    gpu_fields = ("sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "throttle_reasons")
    assert [field for field in gpu_fields if field in reading["unavailable"]] == []
    assert_within(reading["sm_clock_mhz"], observed(rec, CALL_SM_CLOCK), 15, "SM MHz")
    assert_within(reading["mem_clock_mhz"], observed(rec, CALL_MEM_CLOCK), 15, "memory MHz")
    assert_within(reading["temp_c"], observed(rec, CALL_TEMP), 1, "°C")
    watts = [mw / 1000 for mw in observed(rec, CALL_POWER)]
    assert_within(reading["power_w"], watts, max(2, 0.02 * max(watts)), "W")
    masks = observed(rec, CALL_REASONS)
    assert reading["throttle_reasons"] in {",".join(decode_clock_event_reasons(m)) for m in masks}


def test_rooflab_counts_other_processes_from_the_raw_lists(rec):
    own = rec["raw"]["context"]["recorder_pid"]
    reading = rec["rooflab"]["reading"]
    counts = set()
    for which in ("before", "after"):
        compute = entry(rec, "nvmlDeviceGetComputeRunningProcesses(device)", which)
        if "error" in compute:  # rooflab cannot count without the compute list
            counts.add(None)
            continue
        pids = {process["pid"] for process in compute["return"]}
        graphics = entry(rec, "nvmlDeviceGetGraphicsRunningProcesses(device)", which)
        pids |= {process["pid"] for process in graphics.get("return", [])}  # may be refused
        counts.add(len(pids - {own}) if own in pids else max(0, len(pids) - 1))
    assert reading["gpu_other_processes"] in counts
    assert (reading["gpu_other_processes"] is None) == (
        "gpu_other_processes" in reading["unavailable"]
    )
