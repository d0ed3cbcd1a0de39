"""The page-state proof: untouched bytes of a private file mapping, and nothing else, count as the file."""

from __future__ import annotations

import mmap
import sys

import pytest
import torch

from loadguard._files.pages import PageOracle

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="page state is read from Linux's /proc/self/pagemap"
)


@pytest.fixture
def mapped(tmp_path):
    path = tmp_path / "weights.bin"
    data = torch.arange(8 * mmap.PAGESIZE, dtype=torch.uint8)
    path.write_bytes(data.numpy().tobytes())
    handle = open(path, "rb")
    region = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    tensor = torch.frombuffer(region, dtype=torch.uint8)
    yield path, tensor
    del tensor
    try:
        region.close()
    except BufferError:
        pass
    handle.close()


def test_untouched_mapping_is_proven(mapped):
    path, tensor = mapped
    oracle = PageOracle()
    tensor[: 3 * mmap.PAGESIZE].sum()  # read some pages in: present and file-backed
    assert oracle.untouched(tensor.data_ptr(), tensor.numel(), str(path), 0)
    assert oracle.untouched(tensor.data_ptr() + 100, 50, str(path), 100)


def test_a_written_page_is_not(mapped):
    path, tensor = mapped
    tensor[5 * mmap.PAGESIZE + 7] = 1  # copy-on-write of that page only
    oracle = PageOracle()
    assert not oracle.untouched(tensor.data_ptr(), tensor.numel(), str(path), 0)
    assert oracle.untouched(tensor.data_ptr(), 5 * mmap.PAGESIZE, str(path), 0)  # the pages before it still are


def test_wrong_offset_other_file_or_anonymous_memory_are_not(mapped, tmp_path):
    path, tensor = mapped
    oracle = PageOracle()
    assert not oracle.untouched(tensor.data_ptr(), 64, str(path), 64)
    assert not oracle.untouched(tensor.data_ptr(), 64, str(tmp_path / "other.bin"), 0)
    anonymous = tensor.clone()
    assert not oracle.untouched(anonymous.data_ptr(), 64, str(path), 0)
