"""read_trace / write_trace, and the npz reader on what numpy writes beyond the plain dtypes: float16
logits, bfloat16 values stored as float32, uint8 labels, Fortran-ordered and big-endian arrays, read by
the module and by the CLI (the same C++ reader) with the numbers of the plain file."""
import json

import numpy as np
import pytest

import arcal
from conftest import make_predictions, simulated_trace


def test_write_read_round_trip(tmp_path):
    t = simulated_trace(300, 4, seed=1)
    t["features"] = np.random.default_rng(1).normal(size=(300, 2))
    t["feature_names"] = np.array(["a", "bb"])
    t["ids"] = np.arange(300) * 3  # an array arcal does not know: kept
    arcal.write_trace(str(tmp_path / "t.npz"), **t)
    back = arcal.read_trace(str(tmp_path / "t.npz"))
    assert set(back) == set(t)
    for k, v in t.items():
        if k == "meta":
            assert back[k] == v and isinstance(back[k], str)
        else:
            assert np.array_equal(back[k], v) and back[k].dtype == np.asarray(v).dtype, k
    with np.load(tmp_path / "t.npz") as f:  # numpy reads what arcal wrote
        assert np.array_equal(f["routing"], t["routing"]) and json.loads(str(f["meta"])) == json.loads(t["meta"])


def test_write_trace_checks_before_writing(tmp_path):
    z, y = make_predictions(50, 3, seed=2)
    y[7] = 3
    with pytest.raises(ValueError, match=r"write_trace: .*labels\[7\] is 3, but must be in \[0, 2\]"):
        arcal.write_trace(str(tmp_path / "bad.npz"), logits=z, labels=y)
    assert not (tmp_path / "bad.npz").exists()
    with pytest.raises(ValueError, match="object dtype"):
        arcal.write_trace(str(tmp_path / "bad.npz"), logits=z, labels=np.array([None] * 50))
    with pytest.raises(ValueError, match="neither 'logits' nor 'probs'"):
        arcal.write_trace(str(tmp_path / "bad.npz"), labels=y)


def test_read_trace_errors_name_file_and_array(tmp_path):
    z, y = make_predictions(20, 4, seed=3)
    z[3, 1] = np.nan
    np.savez(tmp_path / "nan.npz", logits=z, labels=y)
    with pytest.raises(ValueError, match=r"nan.npz: logits\[3, 1\] is nan, but must be finite"):
        arcal.read_trace(str(tmp_path / "nan.npz"))
    with pytest.raises(ValueError, match="cannot open as a zip archive"):
        arcal.read_trace(str(tmp_path / "missing.npz"))


def variants(z, y):
    """(name, arrays) numpy writes: each must read as the plain float32/int64 file does."""
    bf16 = (z.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)  # bfloat16 values in float32
    return [
        ("float16 logits", {"logits": z.astype(np.float16), "labels": y}),
        ("bfloat16 as float32", {"logits": bf16, "labels": y}),
        ("uint8 labels", {"logits": z, "labels": y.astype(np.uint8)}),
        ("int16 labels", {"logits": z, "labels": y.astype(np.int16)}),
        ("Fortran order", {"logits": np.asfortranarray(z), "labels": y}),
        ("big-endian", {"logits": z.astype(">f4"), "labels": y.astype(">i8")}),
        ("big-endian Fortran float64", {"logits": np.asfortranarray(z.astype(">f8")), "labels": y.astype(">i4")}),
    ]


def plain(name, arrays):
    """The same values as float64 C-order little-endian, as a trace."""
    return {"logits": np.ascontiguousarray(arrays["logits"], dtype=np.float64),
            "labels": np.asarray(arrays["labels"]).astype(np.int64)}


@pytest.mark.parametrize("compressed", [False, True])
def test_numpy_dtypes_and_layouts_read_by_module_and_cli(cli, tmp_path, compressed):
    z, y = make_predictions(400, 5, seed=4)
    save = np.savez_compressed if compressed else np.savez
    for i, (name, arrays) in enumerate(variants(z, y)):
        f, g = tmp_path / f"v{i}.npz", tmp_path / f"p{i}.npz"
        save(f, **arrays)
        save(g, **plain(name, arrays))
        tr = arcal.read_trace(str(f))
        assert tr["logits"].flags.c_contiguous, name
        np.testing.assert_array_equal(tr["logits"].astype(np.float64), plain(name, arrays)["logits"], err_msg=name)
        np.testing.assert_array_equal(tr["labels"], y, err_msg=name)
        a, b = cli("metrics", f, "--json", "--bootstrap", 0).json(), cli("metrics", g, "--json", "--bootstrap", 0).json()
        a.pop("file"), b.pop("file")
        assert a == b, name


def test_small_and_unsigned_integer_labels_and_3d_fortran_routing(tmp_path):
    t = simulated_trace(200, 4, seed=5)
    for dt in [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64, ">u2"]:
        np.savez(tmp_path / "l.npz", logits=t["logits"], labels=t["labels"].astype(dt))
        assert np.array_equal(arcal.read_trace(str(tmp_path / "l.npz"))["labels"], t["labels"]), dt
    np.savez(tmp_path / "r.npz", **{**t, "routing": np.asfortranarray(t["routing"]).astype(">f4")})
    np.testing.assert_array_equal(arcal.read_trace(str(tmp_path / "r.npz"))["routing"], t["routing"])
    big = t["labels"].astype(np.uint64)
    big[0] = 2 ** 63
    np.savez(tmp_path / "u.npz", logits=t["logits"], labels=big)
    with pytest.raises(ValueError, match="uint64 element 0 is 9223372036854775808"):
        arcal.read_trace(str(tmp_path / "u.npz"))
    np.savez(tmp_path / "c.npz", logits=t["logits"].astype(np.complex64), labels=t["labels"])
    with pytest.raises(ValueError, match="unsupported dtype '<c8'"):
        arcal.read_trace(str(tmp_path / "c.npz"))


def test_float16_special_values(tmp_path):
    h = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 6.1e-5, 5.96e-8, np.inf, -np.inf, np.nan], np.float16)
    # An extra array beside a trace: read_trace returns it converted as the reader holds it.
    zz, y = make_predictions(10, 2, seed=1)
    np.savez(tmp_path / "h.npz", logits=zz.astype(np.float16), labels=y, x=h)
    back = arcal.read_trace(str(tmp_path / "h.npz"))["x"]
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, h.astype(np.float32))  # exact, subnormals and infinities included
