"""bench/bench_study.py's arithmetic (the study-against-reference estimates of issue 26): the slot
schedule against bench_train.py's makespan, the host-corrected estimate's invariance to the host's
speed, and the study directory reader's errors. The benchmark itself (a whole study) is not run here."""
import json
import os
import statistics
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)
import bench_study  # noqa: E402


def test_slot_makespan_by_hand():
    # Three jobs of 3 s then three of 1 s on two slots: 3 | 3, then 6 | 3 -> 6 | 4 -> 6 | 5 -> 6 | 6.
    assert bench_study.slot_makespan([3, 3, 3, 1, 1, 1]) == 6
    # Twins that finish the second slot early leave the first Full job's slot the longest.
    assert bench_study.slot_makespan([5, 5, 5, 1, 1, 1]) == 10
    assert bench_study.slot_makespan([4.0], slots=2) == 4.0


def test_slot_makespan_matches_bench_train():
    bench_train = pytest.importorskip("bench_train")  # loads torch and the reference model
    for rate_full, rate_standard in [(700.0, 1900.0), (3300.0, 4200.0), (1000.0, 1000.0)]:
        images = 569600
        assert bench_study.slot_makespan([images / rate_full] * 3 + [images / rate_standard] * 3) == \
            pytest.approx(bench_train.study_makespan(rate_full, rate_standard, images), rel=1e-12)


def fake_runs(train_seconds):
    return {key: {"train_seconds": t, "test_accuracy": 0.86} for key, t in zip(bench_study.ORDER, train_seconds)}


def test_host_corrected_estimate_is_invariant_to_the_hosts_speed():
    # True durations at unit host speed: arcal's six trainings, the study's time outside them, and the
    # reference's makespan. The host runs at speed factor s (time x s) during each measurement.
    arcal_train = [180.0, 178.0, 170.0, 138.0, 139.0, 140.0]
    outside = 110.0
    ref = 1700.0
    arcal_makespan = bench_study.slot_makespan(arcal_train)
    truth = (arcal_makespan + outside) / ref
    for s_study, pair_speeds in [(1.0, [1.0, 1.0]), (0.8, [1.25, 1.1, 1.3]), (1.3, [0.9, 0.85])]:
        runs = fake_runs([t * s_study for t in arcal_train])
        wall = (arcal_makespan + outside) * s_study
        pairs = [(arcal_makespan * s, ref * s) for s in pair_speeds]
        e = bench_study.estimates(wall, runs, pairs)
        assert e["host_corrected"] == pytest.approx(truth, rel=1e-12)
        assert e["host_corrected_range"] == pytest.approx([truth, truth], rel=1e-12)
        assert e["overhead_factor"] == pytest.approx((arcal_makespan + outside) / arcal_makespan, rel=1e-12)
        assert e["study_training_vs_pairs"] == pytest.approx(s_study / statistics.median(pair_speeds), rel=1e-12)
        # The bracketed estimate carries the drift between the study's moment and the pairs'.
        assert e["bracketed"] == pytest.approx(truth * s_study / statistics.median(pair_speeds), rel=1e-12)
    # No drift at all: the two estimates agree.
    e = bench_study.estimates((arcal_makespan + outside), fake_runs(arcal_train), [(arcal_makespan, ref)])
    assert e["bracketed"] == pytest.approx(e["host_corrected"], rel=1e-12)


def test_pair_makespans_match_bench_train():
    # The pairs' rates, turned into the six trainings' makespans once the study's images are known,
    # are bench_train.py's makespans for those images; and the makespans scale with the images.
    bench_train = pytest.importorskip("bench_train")
    rates = [((3300.0, 4200.0), (700.0, 1900.0)), ((3000.0, 4000.0), (650.0, 2000.0))]
    for images in (4450 * 128, 5340 * 128):
        got = bench_study.pair_makespans(rates, images)
        for (cpp, py), (m_cpp, m_py) in zip(rates, got):
            assert m_cpp == pytest.approx(bench_train.study_makespan(cpp[0], cpp[1], images), rel=1e-12)
            assert m_py == pytest.approx(bench_train.study_makespan(py[0], py[1], images), rel=1e-12)
    short, long = bench_study.pair_makespans(rates, 100), bench_study.pair_makespans(rates, 120)
    assert [b / a for a, b in zip(short[0], long[0])] == pytest.approx([1.2, 1.2], rel=1e-12)


def write_run(root, name, residual, seed, summary=True, steps=5340, batch=128):
    d = root / "runs" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model": {"residual": residual},
                                               "train": {"seed": seed, "batch_size": batch}}))
    if summary:
        (d / "summary.json").write_text(json.dumps({"train_seconds": 100.0 + seed, "test_accuracy": 0.855,
                                                    "steps": steps}))
    return d


def test_study_runs_reads_the_six_runs(tmp_path):
    for residual, seed in bench_study.ORDER:
        write_run(tmp_path, f"fashion-mnist-ar-vit-tiny-{residual}-s{seed}-0000", residual, seed)
    runs = bench_study.study_runs(str(tmp_path))
    assert sorted(runs) == sorted(bench_study.ORDER)
    assert runs[("standard", 2)]["train_seconds"] == 102.0
    assert runs[("standard", 2)]["batch_size"] == 128


def test_study_runs_names_a_missing_summary(tmp_path):
    for residual, seed in bench_study.ORDER:
        write_run(tmp_path, f"r-{residual}-{seed}", residual, seed, summary=(residual, seed) != ("full", 1))
    with pytest.raises(SystemExit, match=r"r-full-1/summary.json: missing"):
        bench_study.study_runs(str(tmp_path))


def test_study_runs_refuses_another_study(tmp_path):
    for residual, seed in bench_study.ORDER[:5]:
        write_run(tmp_path, f"r-{residual}-{seed}", residual, seed)
    with pytest.raises(SystemExit, match="expected the default study's"):
        bench_study.study_runs(str(tmp_path))
    with pytest.raises(SystemExit, match="no runs directory"):
        bench_study.study_runs(str(tmp_path / "nothing"))


def test_study_images_from_the_runs(tmp_path):
    for residual, seed in bench_study.ORDER:
        write_run(tmp_path, f"r-{residual}-{seed}", residual, seed)
    assert bench_study.study_images(bench_study.study_runs(str(tmp_path))) == 5340 * 128


def test_study_images_refuses_trainings_of_different_lengths(tmp_path):
    for residual, seed in bench_study.ORDER:
        write_run(tmp_path, f"r-{residual}-{seed}", residual, seed, steps=4450 if seed == 2 else 5340)
    with pytest.raises(SystemExit, match=r"different numbers of images \[569600, 683520\]"):
        bench_study.study_images(bench_study.study_runs(str(tmp_path)))
