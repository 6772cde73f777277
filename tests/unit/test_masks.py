"""Visible-devices masks: the CUDA runtime's syntax, with errors where it would silently hide devices."""

import pytest

from harness.errors import DeviceMaskError
from harness.platform.masks import normalise_bus_id, visible

UUIDS = [
    "GPU-aaaa1111-0000-0000-0000-000000000000",
    "GPU-aaaa2222-0000-0000-0000-000000000000",
    "GPU-bbbb3333-0000-0000-0000-000000000000",
    "GPU-cccc4444-0000-0000-0000-000000000000",
]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("", []),
        ("  ", []),
        ("-1", []),
        ("0", [0]),
        ("3", [3]),
        ("2,0", [2, 0]),
        (" 1 , 3 ", [1, 3]),
        ("1,-1,2", [1]),  # a negative index ends the list, as in CUDA
        ("GPU-bbbb3333-0000-0000-0000-000000000000", [2]),
        ("GPU-cccc", [3]),  # a unique prefix is enough
        ("gpu-BBBB3333", [2]),
        ("GPU-cccc4444,0", [3, 0]),
        ("0,1,2,3", [0, 1, 2, 3]),
    ],
)
def test_valid_masks(value, expected):
    assert visible("CUDA_VISIBLE_DEVICES", value, UUIDS) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("abc", "'abc' is neither a device index nor a GPU- UUID"),
        ("0,0", "device '0' is listed twice"),
        ("1,GPU-aaaa2222", "listed twice"),
        ("4", "index 4 is past the 4 device(s)"),
        ("0,,1", "'' is neither"),
        ("GPU-aaaa", "matches 2 devices"),
        ("GPU-ffff", "matches no device"),
        ("GPU-", "neither"),
        ("1.5", "neither"),
        ("MIG-1234", "neither"),
    ],
)
def test_bad_masks_name_variable_and_value(value, problem):
    with pytest.raises(DeviceMaskError) as error:
        visible("HIP_VISIBLE_DEVICES", value, UUIDS)
    message = str(error.value)
    assert message.startswith(f"HIP_VISIBLE_DEVICES={value!r}: ")
    assert problem in message
    assert "\n" not in message


def test_amd_uuids_match_a_gpu_prefixed_entry():
    assert visible("HIP_VISIBLE_DEVICES", "GPU-5c0f", ["7aff74a1-0000", "5c0f74a1-0000"]) == [1]


def test_index_past_count_on_a_machine_without_devices():
    with pytest.raises(DeviceMaskError, match="past the 0 device"):
        visible("CUDA_VISIBLE_DEVICES", "0", [])


@pytest.mark.parametrize(
    ("bus_id", "expected"),
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        ("0000:1b:00.0", "0000:1b:00.0"),
        ("0001:C3:1F.7", "0001:c3:1f.7"),
    ],
)
def test_bus_ids_of_nvml_and_amdsmi_compare_equal(bus_id, expected):
    assert normalise_bus_id(bus_id) == expected
