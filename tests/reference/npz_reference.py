"""Independent numpy client for arcal's .npz tests.

usage: npz_reference.py write DIR   -> writes savez.npz, savez_compressed.npz, converted.npz (what numpy also
                                       writes: big-endian, Fortran order, float16, small/unsigned ints) and
                                       the bad_*.npz cases
       npz_reference.py check FILE  -> np.load()s a file arcal wrote and checks names, dtypes, shapes, values
The expected arrays are defined once here (expected()); the C++ test hard-codes the same values.
"""
import sys
import numpy as np


def expected():
    return {
        "f8": np.arange(12, dtype="<f8").reshape(3, 4) * 0.5 - 1.25,
        "f4": np.linspace(-1, 1, 6, dtype="<f4").reshape(2, 3),
        "i4": np.arange(-3, 3, dtype="<i4"),
        "i8": np.array([2**40, -7, 0], dtype="<i8"),
        "b1": np.array([True, False, True]),
        "u1": np.array(["alpha", "\u03b2eta", ""]),
        "meta": np.array('{"model": "ar-vit-tiny", "seed": 3}'),
        "empty": np.zeros((0, 3), dtype="<f8"),
        "cube": np.arange(24, dtype="<f4").reshape(2, 3, 4),
    }


def write(d):
    e = expected()
    np.savez(f"{d}/savez.npz", **e)
    np.savez_compressed(f"{d}/savez_compressed.npz", **e)
    half = np.array([0.0, -2.5, 65504.0, 2.0 ** -14, 2.0 ** -24, np.inf, -np.inf], dtype=np.float16)
    np.savez(f"{d}/converted.npz",
             fort=np.asfortranarray(np.arange(6.0).reshape(2, 3)),
             fort3=np.asfortranarray(np.arange(24, dtype=">f4").reshape(2, 3, 4)),
             big=np.arange(3, dtype=">f8"), big_i4=np.array([-5, 7], dtype=">i4"),
             big_u=np.array(["ab", "\u03b2"], dtype=">U2"),
             half=half, half_big=half.astype(">f2"),
             i1=np.array([-128, 127], np.int8), u1=np.array([0, 255], np.uint8), i2=np.array([-32768, 5], np.int16),
             u2=np.array([65535], np.uint16), u4=np.array([4294967295], np.uint32),
             u8=np.array([2 ** 63 - 1], np.uint64), b1_big=np.array([True, False], dtype=">?"))
    np.savez(f"{d}/bad_uint64.npz", huge=np.array([1, 2 ** 63], np.uint64))
    np.savez(f"{d}/bad_object.npz", obj=np.array([{"a": 1}, None], dtype=object))
    np.savez(f"{d}/bad_complex.npz", cplx=np.zeros(2, dtype=np.complex128))


def check(path):
    e = expected()
    with np.load(path, allow_pickle=False) as z:
        names = sorted(z.files)
        if names != sorted(e):
            sys.exit(f"names differ: {names} vs {sorted(e)}")
        for k, v in e.items():
            got = z[k]
            if got.dtype != v.dtype:
                sys.exit(f"{k}: dtype {got.dtype} != {v.dtype}")
            if got.shape != v.shape:
                sys.exit(f"{k}: shape {got.shape} != {v.shape}")
            if not np.array_equal(got, v):
                sys.exit(f"{k}: values differ: {got} vs {v}")
            if not got.flags["C_CONTIGUOUS"]:
                sys.exit(f"{k}: not C-contiguous")
    print("OK")


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
