"""Where jobs ran, on the pages: the job page and its JSON, the matrix tooltip, the backend page's runner and device
filters, its hardware share and its sick runners."""

from tests.hud import builders

ENV = {"device": "Ascend910B", "device_count": 8, "driver": "24.1", "runner": "npu-07", "runner_labels": ["arm64"]}


def two_jobs(make_backend):
    backend = make_backend("acme/npu")
    dispatch = builders.dispatch(backend, sha="a" * 40, at=builders.ago(hours=2), pr=builders.pull_request(7, "a" * 40))
    on = builders.job(backend, name="on-npu", dispatch_=dispatch, environment=ENV)
    off = builders.job(backend, name="elsewhere", dispatch_=dispatch, environment={"runner": "x86-1", "device": "cpu"})
    bare = builders.job(backend, name="unstated", dispatch_=dispatch)
    return on, off, bare


def test_the_job_page_and_json_say_where_it_ran(client, make_backend):
    on, _, bare = two_jobs(make_backend)

    page = client.get(f"/oot/acme/npu/jobs/{on.pk}/").content.decode()
    found = client.get(f"/api/oot/acme/npu/jobs/{on.pk}/").json()

    assert '<span class="tag">runner</span> npu-07' in page and "arm64" in page
    assert found["environment"] == ENV and found["infra_candidate"] is None
    assert "not stated" in client.get(f"/oot/acme/npu/jobs/{bare.pk}/").content.decode()


def test_the_matrix_tooltip_shows_the_environment(client, make_backend):
    two_jobs(make_backend)

    page = client.get("/oot/acme/npu/").content.decode()

    assert "ran on Ascend910B × 8 · 24.1 · runner npu-07" in page


def test_the_backend_page_filters_by_runner_label_and_device(client, make_backend):
    two_jobs(make_backend)

    by_label = client.get("/oot/acme/npu/?runner=arm64").content.decode()
    by_device = client.get("/api/oot/acme/npu/?device=CPU").json()

    assert "on-npu" in by_label and "elsewhere" not in by_label and "unstated" not in by_label
    assert by_device["matrix"]["columns"] == ["ci / elsewhere"]


def test_the_backend_page_gives_the_share_of_jobs_with_hardware_information(client, make_backend):
    two_jobs(make_backend)

    page = client.get("/oot/acme/npu/").content.decode()
    found = client.get("/api/oot/acme/npu/").json()["hardware"]

    assert (found["jobs"], found["with_hardware"], found["percent"], found["meets_goal"]) == (3, 2, 66.7, False)
    assert "2 of 3 jobs name their device or runner · goal ≥ 95%" in page


def test_a_sick_runner_is_flagged_on_the_backend_page_and_its_failures_are_infra_candidates(client, make_backend):
    backend = make_backend("acme/npu")
    jobs = [
        builders.job(
            backend, name=f"b{i}", conclusion="failure" if i < 9 else "success", environment={"runner": "npu-07"}
        )
        for i in range(12)
    ]
    for i in range(40):
        builders.job(
            backend, name=f"g{i}", conclusion="failure" if i < 2 else "success", environment={"runner": "npu-01"}
        )

    page = client.get("/oot/acme/npu/?event=nightly").content.decode()
    job_page = client.get(f"/oot/acme/npu/jobs/{jobs[0].pk}/").content.decode()

    assert "data-sick-runners" in page and "9 of 11 failures on runner npu-07" in page
    assert "data-infra-candidate" in job_page and "works elsewhere (2 of 40 failed)" in job_page
    assert client.get(f"/api/oot/acme/npu/jobs/{jobs[0].pk}/").json()["infra_candidate"]["runner"] == "runner:npu-07"
