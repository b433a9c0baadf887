"""Host tests of streamkit.MinMaxScaler and streamkit.normalize_many (no GPU needed): exports,
docstrings, scikit-learn's estimator interface, and every argument error, raised with a message that
begins with the argument's name, before any CUDA work and before anything is written. NumPy arrays
serve as inputs: their checks come before any device work."""

import copy
import pickle
import sys

import numpy as np
import pytest

import streamkit
from streamkit import _minmax

no_gpu_only = pytest.mark.skipif(streamkit.device_count() > 0, reason="checks the failure without a GPU; a GPU is visible")


def data(rows=5, cols=3, dtype=np.float64):
    return np.arange(rows * cols, dtype=dtype).reshape(rows, cols)


def poisoned(shape, dtype=np.float64, order="C"):
    return np.full(shape, -777.0, dtype=dtype, order=order)


# exports and documentation


def test_exports():
    assert {"MinMaxScaler", "normalize_many"} <= set(streamkit.__all__)
    assert streamkit.MinMaxScaler is _minmax.MinMaxScaler and streamkit.normalize_many is _minmax.normalize_many


def test_public_names_have_docstrings():
    public = [streamkit.MinMaxScaler, streamkit.normalize_many]
    public += [getattr(streamkit.MinMaxScaler, name) for name in (
        "fit", "partial_fit", "transform", "fit_transform", "inverse_transform", "get_params", "set_params",
        "get_feature_names_out", "data_min_", "data_max_", "data_range_", "scale_", "min_")]
    for item in public:
        assert item.__doc__ and len(item.__doc__.strip()) > 20, item


def test_importing_streamkit_does_not_import_sklearn():
    code = "import sys, streamkit; sys.exit(1 if any(m.startswith('sklearn') for m in sys.modules) else 0)"
    import subprocess

    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# parameters and scikit-learn's estimator interface


def test_constructor_keeps_parameters_as_given():
    feature_range = [2, 5]
    scaler = streamkit.MinMaxScaler(feature_range, clip=True)
    assert scaler.feature_range is feature_range and scaler.clip is True
    assert scaler.get_params() == {"clip": True, "feature_range": [2, 5]}
    assert scaler.get_params(deep=True) == scaler.get_params(deep=False)


def test_set_params_returns_self_and_rejects_unknown_names():
    scaler = streamkit.MinMaxScaler()
    assert scaler.set_params(feature_range=(-1, 1), clip=True) is scaler
    assert scaler.get_params() == {"clip": True, "feature_range": (-1, 1)}
    with pytest.raises(ValueError, match="^copy: not a parameter of MinMaxScaler"):
        scaler.set_params(copy=False)
    assert scaler.get_params() == {"clip": True, "feature_range": (-1, 1)}


def test_repr_shows_changed_parameters():
    assert repr(streamkit.MinMaxScaler()) == "MinMaxScaler()"
    assert repr(streamkit.MinMaxScaler((-1, 1), clip=True)) == "MinMaxScaler(feature_range=(-1, 1), clip=True)"


def test_unfitted_scaler_pickles_and_copies():
    scaler = streamkit.MinMaxScaler((2, 3), clip=True)
    for twin in (pickle.loads(pickle.dumps(scaler)), copy.deepcopy(scaler)):
        assert isinstance(twin, streamkit.MinMaxScaler) and twin.get_params() == scaler.get_params()


def test_clone_and_pipeline_construction():
    base = pytest.importorskip("sklearn.base", reason="scikit-learn is not installed")
    pipeline = pytest.importorskip("sklearn.pipeline", reason="scikit-learn is not installed")
    from sklearn.linear_model import LogisticRegression

    scaler = streamkit.MinMaxScaler((-1, 1), clip=True)
    twin = base.clone(scaler)
    assert twin is not scaler and twin.get_params() == scaler.get_params()
    pipe = pipeline.Pipeline([("scale", scaler), ("model", LogisticRegression())])
    assert pipe.get_params(deep=True)["scale__feature_range"] == (-1, 1)
    pipe.set_params(scale__clip=False, scale__feature_range=(0, 2))
    assert scaler.clip is False and scaler.feature_range == (0, 2)
    cloned = base.clone(pipe)
    assert cloned.named_steps["scale"] is not scaler and cloned.named_steps["scale"].get_params() == scaler.get_params()
    pipeline.make_pipeline(streamkit.MinMaxScaler(), LogisticRegression())


def test_sklearn_tags():
    tags = pytest.importorskip("sklearn.utils", reason="scikit-learn is not installed")
    found = tags.get_tags(streamkit.MinMaxScaler())
    assert found.input_tags.allow_nan and found.requires_fit and found.transformer_tags is not None
    assert set(found.transformer_tags.preserves_dtype) == {"float32", "float64"}


@no_gpu_only
def test_pipeline_fit_reaches_the_scaler():
    """scikit-learn's Pipeline machinery accepts the scaler up to its fit_transform, which needs a GPU."""
    pipeline = pytest.importorskip("sklearn.pipeline", reason="scikit-learn is not installed")
    from sklearn.linear_model import LogisticRegression

    pipe = pipeline.Pipeline([("scale", streamkit.MinMaxScaler()), ("model", LogisticRegression())])
    with pytest.raises(streamkit.CudaError):
        pipe.fit(data(), np.arange(5) % 2)


# the unfitted scaler


@pytest.mark.parametrize("method", ["transform", "inverse_transform"])
def test_unfitted_transform_raises_not_fitted(method):
    exceptions = pytest.importorskip("sklearn.exceptions", reason="scikit-learn is not installed")
    out = poisoned((5, 3))
    with pytest.raises(exceptions.NotFittedError, match="not fitted yet"):
        getattr(streamkit.MinMaxScaler(), method)(data(), out=out)
    assert (out == -777).all()


def test_unfitted_scaler_has_no_fitted_attributes():
    scaler = streamkit.MinMaxScaler()
    for name in ("data_min_", "data_max_", "data_range_", "scale_", "min_", "n_features_in_", "n_samples_seen_"):
        assert not hasattr(scaler, name)
    with pytest.raises(AttributeError):
        scaler.get_feature_names_out()
    assert not scaler.__sklearn_is_fitted__()


def test_check_is_fitted():
    validation = pytest.importorskip("sklearn.utils.validation", reason="scikit-learn is not installed")
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        validation.check_is_fitted(streamkit.MinMaxScaler())


def test_not_fitted_error_without_sklearn(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.exceptions", None)  # makes the import fail
    with pytest.raises(_minmax.NotFittedError, match="not fitted yet") as caught:
        streamkit.MinMaxScaler().transform(data())
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, AttributeError)


# argument errors of fit, partial_fit, fit_transform (all before any device work)

FITS = ["fit", "partial_fit", "fit_transform"]


def call(method, scaler, X, **kwargs):
    return getattr(scaler, method)(X, **kwargs)


@pytest.mark.parametrize("method", FITS)
@pytest.mark.parametrize("X", [[[1.0, 2.0]], 3.0, "abc", None], ids=["list", "float", "str", "None"])
def test_non_array_is_type_error(method, X):
    with pytest.raises(TypeError, match="^X: expected an array"):
        call(method, streamkit.MinMaxScaler(), X)


@pytest.mark.parametrize("method", FITS)
@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int64, np.uint8, np.complex64, np.bool_])
def test_bad_dtype_is_type_error(method, dtype):
    with pytest.raises(TypeError, match="^X: expected dtype float32 or float64"):
        call(method, streamkit.MinMaxScaler(), np.zeros((4, 3), dtype=dtype))


@pytest.mark.parametrize("method", FITS)
@pytest.mark.parametrize("shape", [(4,), (4, 3, 2), (), (1, 1, 1)])
def test_bad_rank_is_value_error(method, shape):
    with pytest.raises(ValueError, match=r"^X: expected a 2-D array of shape \(n_samples, n_features\)"):
        call(method, streamkit.MinMaxScaler(), np.zeros(shape))


def test_one_dimensional_input_suggests_reshape():
    with pytest.raises(ValueError, match=r"reshape\(-1, 1\)"):
        streamkit.MinMaxScaler().fit(np.zeros(4))


@pytest.mark.parametrize("method", FITS)
def test_no_sample_is_value_error(method):
    with pytest.raises(ValueError, match=r"^X: found array with 0 sample\(s\) \(shape \(0, 3\)\)"):
        call(method, streamkit.MinMaxScaler(), np.zeros((0, 3)))


@pytest.mark.parametrize("method", FITS)
def test_no_feature_is_value_error(method):
    with pytest.raises(ValueError, match=r"^X: found array with 0 feature\(s\) \(shape \(3, 0\)\)"):
        call(method, streamkit.MinMaxScaler(), np.zeros((3, 0)))


@pytest.mark.parametrize("method", FITS)
@pytest.mark.parametrize(
    "make",
    [lambda: np.zeros((6, 6))[::-1], lambda: np.zeros((6, 6))[:, ::-1], lambda: np.zeros((6, 6))[::2, ::2],
     lambda: np.zeros((6, 6)).T[::2], lambda: np.broadcast_to(np.zeros(3), (4, 3)),
     lambda: np.lib.stride_tricks.as_strided(np.zeros(20), (4, 3), (8, 8))],
    ids=["reversed rows", "reversed columns", "both strided", "strided transposed", "broadcast rows", "overlapping rows"],
)
def test_strides_no_view_takes_are_value_error(method, make):
    with pytest.raises(ValueError, match="^X: element strides .* are neither row-major .* copy it"):
        call(method, streamkit.MinMaxScaler(), make())


def test_misaligned_data_is_value_error():
    raw = np.zeros(8 * 13 * 8 + 4, dtype=np.uint8)[4:]
    misaligned = raw.view(np.float64).reshape(13, 8)[:, :4]
    with pytest.raises(ValueError, match="^X: data is not aligned"):
        streamkit.MinMaxScaler().fit(misaligned)


@pytest.mark.parametrize(
    "make, layout",
    [(lambda: data(), (5, 3, "float64", False, 0, False)),
     (lambda: np.asfortranarray(data()), (5, 3, "float64", False, 0, True)),
     (lambda: data(6, 6)[1:4, 2:5], (3, 3, "float64", False, 0, False)),
     (lambda: np.asfortranarray(data(6, 6))[1:5, 2:4], (4, 2, "float64", False, 0, True)),
     (lambda: data(6, 6)[:, 2:3], (6, 1, "float64", False, 0, False)),
     (lambda: data(6, 6)[2:3, ::2], (1, 3, "float64", False, 0, False)),
     (lambda: data(1, 1, np.float32), (1, 1, "float32", False, 0, False)),
     (lambda: np.zeros((0, 4)), (0, 4, "float64", False, 0, False))],
    ids=["C", "F", "sliced", "F sliced", "one column", "one strided row", "1x1", "empty"],
)
def test_layouts_views_take(make, layout):
    assert streamkit._streamkit._matrix_check(make(), "X") == layout


@pytest.mark.parametrize("method", FITS)
@pytest.mark.parametrize(
    "feature_range, error, text",
    [((1, 0), ValueError, "minimum of desired feature range must be smaller than maximum"),
     ((1, 1), ValueError, "minimum of desired feature range"),
     ((0, float("inf")), ValueError, "both ends must be finite"),
     ((float("nan"), 1), ValueError, "both ends must be finite"),
     ((0, 1, 2), TypeError, "expected a pair"),
     ("ab", TypeError, "expected a pair"),
     ((0, "1"), TypeError, "expected a pair"),
     ((False, True), TypeError, "expected a pair"),
     (None, TypeError, "expected a pair")],
)
def test_bad_feature_range_is_rejected_at_fit(method, feature_range, error, text):
    scaler = streamkit.MinMaxScaler(feature_range)  # accepted as given, like scikit-learn
    with pytest.raises(error, match=f"^feature_range: {text}"):
        call(method, scaler, data())


def test_feature_range_that_closes_in_float32_is_value_error():
    out = poisoned((5, 3), np.float32)
    with pytest.raises(ValueError, match=r"^feature_range: \(0, 1e-50\) is not a finite interval .* in float32"):
        streamkit.MinMaxScaler((0, 1e-50)).fit_transform(data(dtype=np.float32), out=out)
    assert (out == -777).all()


@pytest.mark.parametrize("method", FITS)
@pytest.mark.parametrize("clip", [1, 0, "yes", None, 1.0])
def test_non_bool_clip_is_type_error(method, clip):
    with pytest.raises(TypeError, match="^clip: expected a bool"):
        call(method, streamkit.MinMaxScaler(clip=clip), data())


@pytest.mark.parametrize("method", FITS)
@pytest.mark.parametrize("stream, error", [("s", TypeError), (1.5, TypeError), (True, TypeError), (-1, ValueError)])
def test_bad_stream_is_rejected(method, stream, error):
    with pytest.raises(error, match="^stream: "):
        call(method, streamkit.MinMaxScaler(), data(), stream=stream)


def test_fit_transform_bad_out_is_rejected_before_writing():
    X = data()
    cases = [
        (poisoned((5, 4)), ValueError, r"^out: expected shape \(5, 3\) \(X's\), got \(5, 4\)"),
        (poisoned((3, 5)), ValueError, r"^out: expected shape \(5, 3\)"),
        (poisoned((5, 3), np.float32), TypeError, r"^out: expected dtype float64 \(X's\), got float32"),
        (poisoned((15,)), ValueError, "^out: expected a 2-D array"),
        (poisoned((10, 6))[::2, ::2], ValueError, "^out: element strides"),
        (poisoned((5, 3), np.int64), TypeError, "^out: expected dtype float32 or float64"),
    ]
    for out, error, text in cases:
        scaler = streamkit.MinMaxScaler()
        with pytest.raises(error, match=text):
            scaler.fit_transform(X, out=out)
        assert (out == -777).all()
        assert not scaler.__sklearn_is_fitted__()
    with pytest.raises(TypeError, match="^out: expected an array"):
        streamkit.MinMaxScaler().fit_transform(X, out=[[0.0] * 3] * 5)


def test_fit_transform_read_only_out_is_value_error():
    out = poisoned((5, 3))
    out.flags.writeable = False
    with pytest.raises(ValueError, match="^out: the NumPy array is read-only"):
        streamkit.MinMaxScaler().fit_transform(data(), out=out)
    assert (out == -777).all()


def test_rejected_fit_keeps_the_scaler_unfitted():
    scaler = streamkit.MinMaxScaler()
    with pytest.raises(ValueError):
        scaler.fit(np.zeros((0, 3)))
    assert not hasattr(scaler, "n_features_in_") and not scaler.__sklearn_is_fitted__()


@no_gpu_only
def test_valid_host_call_without_gpu_is_cuda_error_and_writes_nothing():
    out = poisoned((5, 3))
    scaler = streamkit.MinMaxScaler()
    with pytest.raises(streamkit.CudaError):
        scaler.fit_transform(data(), out=out)
    assert (out == -777).all()
    assert not scaler.__sklearn_is_fitted__()


# normalize_many


def test_normalize_many_empty_batch():
    assert streamkit.normalize_many([]) == []
    assert streamkit.normalize_many((), out=()) == []


def test_normalize_many_arrays_without_elements_need_no_gpu():
    arrays = [np.zeros((0, 3)), np.zeros((4, 0), dtype=np.float32), np.asfortranarray(np.zeros((0, 2)))]
    results = streamkit.normalize_many(arrays)
    assert [r.shape for r in results] == [(0, 3), (4, 0), (0, 2)]
    assert [r.dtype for r in results] == [np.float64, np.float32, np.float64]


@pytest.mark.parametrize("arrays", [data(), None, 3, "abc", {"a": data()}], ids=["ndarray", "None", "int", "str", "dict"])
def test_normalize_many_arrays_must_be_a_list(arrays):
    with pytest.raises(TypeError, match="^arrays: expected a list or tuple"):
        streamkit.normalize_many(arrays)


@pytest.mark.parametrize(
    "bad, error, text",
    [([1.0, 2.0], TypeError, "expected an array"),
     (np.zeros((3, 2), np.int32), TypeError, "expected dtype float32 or float64, got int32"),
     (np.zeros(3), ValueError, "expected a 2-D array"),
     (np.zeros((6, 6))[::-1], ValueError, "element strides")],
    ids=["list", "int32", "1-D", "reversed"],
)
def test_normalize_many_bad_array_is_named(bad, error, text):
    out = [poisoned((5, 3)), poisoned((5, 3))]
    with pytest.raises(error, match=rf"^arrays\[1\]: {text}"):
        streamkit.normalize_many([data(), bad], out=out)
    assert all((o == -777).all() for o in out)


@pytest.mark.parametrize(
    "feature_range, error", [((1, 0), ValueError), ((0, float("inf")), ValueError), ((0,), TypeError), (3, TypeError)]
)
def test_normalize_many_bad_feature_range(feature_range, error):
    with pytest.raises(error, match="^feature_range: "):
        streamkit.normalize_many([data()], feature_range=feature_range)


def test_normalize_many_feature_range_closing_in_float32_writes_nothing():
    arrays = [data(), data(dtype=np.float32)]
    out = [poisoned((5, 3)), poisoned((5, 3), np.float32)]
    with pytest.raises(ValueError, match=r"^feature_range: .* in float32"):
        streamkit.normalize_many(arrays, feature_range=(1.0, 1.0 + 1e-12), out=out)
    assert all((o == -777).all() for o in out)


def test_normalize_many_bad_out_is_rejected_before_writing():
    arrays = [data(), data(4, 2, np.float32)]
    read_only = poisoned((4, 2), np.float32)
    read_only.flags.writeable = False
    cases = [
        ([poisoned((5, 3))], ValueError, r"^out: 1 arrays for 2 inputs"),
        ([poisoned((5, 3)), poisoned((2, 4), np.float32)], ValueError, r"^out\[1\]: expected shape \(4, 2\) \(arrays\[1\]'s\)"),
        ([poisoned((5, 3)), poisoned((4, 2))], TypeError, r"^out\[1\]: expected dtype float32 \(arrays\[1\]'s\), got float64"),
        ([poisoned((5, 3)), read_only], ValueError, r"^out\[1\]: the NumPy array is read-only"),
        ([poisoned((5, 3)), "x"], TypeError, r"^out\[1\]: expected an array"),
        ([poisoned((10, 6))[::2, ::2], poisoned((4, 2), np.float32)], ValueError, r"^out\[0\]: element strides"),
    ]
    for out, error, text in cases:
        with pytest.raises(error, match=text):
            streamkit.normalize_many(arrays, out=out)
        assert all((o == -777).all() for o in out if isinstance(o, np.ndarray))
    with pytest.raises(TypeError, match="^out: expected a list or tuple"):
        streamkit.normalize_many(arrays, out=poisoned((5, 3)))


@no_gpu_only
def test_normalize_many_without_gpu_is_runtime_error_and_writes_nothing():
    arrays = [data(), data(4, 2, np.float32)]
    out = [poisoned((5, 3)), poisoned((4, 2), np.float32)]
    with pytest.raises(RuntimeError, match="no CUDA device"):
        streamkit.normalize_many(arrays, out=out)
    assert all((o == -777).all() for o in out)
