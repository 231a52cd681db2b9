import pytest

from ootci.models import Backend


@pytest.fixture
def make_backend(db):
    def make(repo: str = "ascend/pytorch-npu", level: str = "L2", **fields) -> Backend:
        fields.setdefault("device", "npu" if level == "L3" else "")
        return Backend.objects.create(repo=repo, level=level, **fields)

    return make
