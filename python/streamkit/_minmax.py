"""streamkit.MinMaxScaler and streamkit.normalize_many: per-column (per-feature) min-max scaling."""

from __future__ import annotations

import math
import numbers

from . import _arrays, _streamkit


class NotFittedError(ValueError, AttributeError):
    """Raised by a method of an unfitted :class:`MinMaxScaler` when scikit-learn is not importable
    (with scikit-learn, its ``sklearn.exceptions.NotFittedError``, which has the same bases)."""


def _not_fitted(what):
    """The exception for `what` (a method or attribute name) of an unfitted scaler."""
    try:
        from sklearn.exceptions import NotFittedError as error_type
    except ImportError:
        error_type = NotFittedError
    return error_type(
        f"This MinMaxScaler instance is not fitted yet. Call 'fit' with appropriate arguments before using {what}."
    )


def _check_feature_range(feature_range):
    """(lo, hi) as floats: a pair of finite numbers with lo < hi; TypeError / ValueError naming feature_range."""
    if not isinstance(feature_range, (tuple, list)) or len(feature_range) != 2 or not all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in feature_range
    ):
        raise TypeError(f"feature_range: expected a pair (min, max) of numbers, got {feature_range!r}")
    lo, hi = float(feature_range[0]), float(feature_range[1])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"feature_range: both ends must be finite, got {feature_range!r}")
    if not lo < hi:
        raise ValueError(
            f"feature_range: minimum of desired feature range must be smaller than maximum, got {feature_range!r}"
        )
    return lo, hi


def _check_clip(clip):
    numpy_bool = type(clip).__module__ == "numpy" and type(clip).__name__ in ("bool", "bool_")  # as scikit-learn accepts
    if not (isinstance(clip, bool) or numpy_bool):
        raise TypeError(f"clip: expected a bool, got {type(clip).__name__}")
    return bool(clip)


def _writable_out(out, name):
    """`out` as a DLPack array the compiled module writes; JAX and read-only NumPy arrays are refused."""
    kind = _arrays.framework(out)
    if kind == "jax":
        raise TypeError(f"{name}: JAX arrays are immutable; leave {name}=None to get new JAX arrays")
    if kind == "numpy" and not out.flags.writeable:
        raise ValueError(f"{name}: the NumPy array is read-only")
    return _arrays.as_dlpack(out, name)


def _stream(stream, array, on_cuda, device):
    """The stream handle of a call: that of `stream` (or the framework's current stream) for CUDA
    arrays; host arrays run on the scaler's own stream and wait, so `stream` is only checked."""
    if on_cuda:
        return _arrays.stream_handle(stream, array, device)
    if stream is not None:
        _arrays.stream_handle(stream, array, device)
    return 0


def _place_of(array, on_cuda, device):
    """Where the fitted attributes go: the framework and device of the last fit's input."""
    if not on_cuda:
        return ("numpy", None)
    kind = _arrays.framework(array)
    if kind == "torch":
        return (kind, array.device)
    if kind == "jax":
        return (kind, next(iter(array.devices())))
    if kind in ("cupy", "numba"):
        return (kind, device)
    return ("numpy", None)  # other DLPack producers: their arrays cannot be made here


def _to_place(values, place):
    """A host NumPy array `values` as an array of the framework and device `place`."""
    kind, device = place
    if kind == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            return cupy.asarray(values)
    if kind == "torch":
        import torch

        return torch.from_numpy(values).to(device)
    if kind == "jax":
        import jax

        return jax.device_put(values, device)
    if kind == "numba":
        from numba import cuda

        with cuda.gpus[device]:
            return cuda.to_device(values)
    return values


def _fitted_arrays(data_min, data_max, scale, lo, place):
    """The five fitted attributes by name from host copies of the fitted minima, maxima and scales
    (data_range_ and min_ computed as scikit-learn computes them), placed in `place`'s framework."""
    import numpy

    lo = numpy.asarray(lo, dtype=data_min.dtype)
    with numpy.errstate(all="ignore"):  # ±inf data give inf - inf and inf * 0 (NaN), as documented
        host = {
            "data_min_": data_min,
            "data_max_": data_max,
            "data_range_": data_max - data_min,
            "scale_": scale,
            "min_": lo - data_min * scale,
        }
    return {name: _to_place(values, place) for name, values in host.items()}


class MinMaxScaler:
    """Scales each feature (column) of 2-D arrays to ``feature_range``, like scikit-learn's
    ``sklearn.preprocessing.MinMaxScaler``, on CUDA arrays without a copy.

    ``X_scaled = lo + (X - data_min_) * scale_`` with ``scale_ = (hi - lo) / data_range_``, per
    column, where ``(lo, hi) = feature_range``.

    Parameters
    ----------
    feature_range : (float, float), default (0, 1)
        The interval ``(lo, hi)``, finite, ``lo < hi`` (checked at fit, as scikit-learn does; also in
        float32 for float32 data).
    clip : bool, default False
        Clamp transformed values to ``feature_range`` (NaN stays NaN).

    Inputs
    ------
    ``X`` of shape (n_samples, n_features), float32 or float64:

    - a CUDA array, taken without a copy: any DLPack array (CuPy, PyTorch, JAX) or
      ``__cuda_array_interface__`` object (Numba). Row-major arrays (column stride 1, row stride at
      least n_features: C order, or rows sliced from a wider array) and column-major arrays (row
      stride 1: Fortran order, transposed arrays) pass; other strides raise ValueError (copy them).
      The work is enqueued on ``stream`` and the call returns (asynchronous like a CuPy or PyTorch
      operation); inputs must stay alive until the stream has passed it.
    - a host array (NumPy): copied to the scaler's GPU (device 0 before the first fit, else the
      device of the last fit), scaled there on a stream of the scaler's, copied back; the call waits.

    Results come back in the framework of ``X`` (CuPy in, CuPy out; torch, same device; JAX; Numba;
    host arrays give NumPy), newly allocated from that framework's allocator (JAX: from memory
    streamkit allocates), or written into ``out``. For JAX results the stream is waited for first.

    The scaler keeps its fitted state on the GPU in a C++ ``streamkit::minmax_scaler``: repeated
    fits and transforms of one shape allocate nothing after the first. Transforms are ordered after
    the last fit, and fits after earlier transforms, on the device whatever their streams. A
    partial_fit or transform of CUDA arrays must use the device of the last fit.

    Fitted attributes
    -----------------
    data_min_, data_max_, data_range_, scale_, min_ : arrays of shape (n_features,)
        As scikit-learn's, of the fitted dtype, in the framework of the last fit's input (CuPy,
        torch on its device, JAX on its device, Numba, or NumPy for host inputs and other
        frameworks). They are computed on first access after a fit (a small copy to the host that
        waits for the fit, then one to the framework; NumPy is needed for that) and then kept.
        NaN is ignored; an all-NaN column gets NaN in all five. A column whose range is below
        10 × the dtype's epsilon is constant: its range counts as 1 in ``scale_``.
    n_features_in_ : int
    n_samples_seen_ : int
        Rows seen since the last fit (partial_fit adds up).

    Differences from scikit-learn
    -----------------------------
    - The fitted attributes equal scikit-learn's bit for bit on the same data. Transforms compute
      ``lo + (x - data_min_) * scale_`` (the CUDA compiler may fuse the multiply-add), scikit-learn
      ``x * scale_ + min_``; the two differ by rounding only, at most about
      ``4 * eps * (|x * scale_| + |min_| + |lo| + |hi|)`` per element (eps of the dtype), and
      constant columns map to exactly ``lo`` here. ``inverse_transform`` computes
      ``(y - lo) / scale_ + data_min_`` (scikit-learn ``(y - min_) / scale_``).
    - ``partial_fit`` ignores NaN across batches too: a column that is all NaN in some batches but
      not in others gets the minimum and maximum of its values, as one ``fit`` of all the batches
      gives (scikit-learn's running ``np.minimum`` turns such a column into NaN for good).
    - ±inf are accepted (scikit-learn raises ValueError): they take part in min and max; a column
      holding one gets an infinite range and scale 0, so its finite values map to ``lo`` (NaN when
      its min is -inf) and the infinities to NaN.
    - ``X`` must be an array of float32 or float64 (no lists, DataFrames, integer or float16
      arrays: TypeError); the dtype is kept, and later transforms and partial fits must have the
      fitted dtype (TypeError otherwise).
    - ``feature_range`` and ``clip`` are read at ``fit`` (or a first ``partial_fit``): after
      ``set_params`` changes them, ``partial_fit``, ``transform`` and ``inverse_transform`` raise
      ValueError until the next ``fit``.
    - ``copy`` is not a parameter: pass ``out=X`` to scale in place. A fitted scaler cannot be
      pickled or deep-copied (its state lives on the GPU); ``sklearn.base.clone`` works.

    Errors
    ------
    TypeError, ValueError naming the argument (bad shapes, dtypes, strides, devices, parameters)
    before any CUDA work and before anything is written; an unfitted scaler raises
    ``sklearn.exceptions.NotFittedError`` (``streamkit._minmax.NotFittedError`` without scikit-learn;
    both are ValueError and AttributeError); MemoryError for a failed device allocation;
    ``streamkit.CudaError`` for other CUDA failures (also for host arrays without a GPU).

    scikit-learn
    ------------
    ``get_params``, ``set_params``, ``sklearn.base.clone`` and use as a ``Pipeline`` step work when
    scikit-learn is installed; it is never imported unless needed (tags, the not-fitted error).
    """

    def __init__(self, feature_range=(0, 1), *, clip=False):
        self.feature_range = feature_range
        self.clip = clip
        self._compiled = None  # the _streamkit._MinMaxScaler, made by the first fit
        self._compiled_params = None  # (lo, hi, clip) it was made with
        self._place = None  # where the fitted attributes go
        self._fitted_cache = None

    # scikit-learn's estimator interface

    def get_params(self, deep=True):
        """The parameters ``{"clip": ..., "feature_range": ...}`` (`deep` is accepted for
        scikit-learn; the scaler holds no sub-estimators)."""
        return {"clip": self.clip, "feature_range": self.feature_range}

    def set_params(self, **params):
        """Sets parameters by name and returns self; they take effect at the next ``fit``.
        ValueError naming an unknown parameter."""
        valid = self.get_params()
        for name in params:
            if name not in valid:
                raise ValueError(f"{name}: not a parameter of MinMaxScaler (valid: {', '.join(sorted(valid))})")
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def __sklearn_is_fitted__(self):
        """True once a fit has been made."""
        return self._compiled is not None and self._compiled.describe()[0] > 0

    def __sklearn_tags__(self):
        """scikit-learn's tags (scikit-learn ≥ 1.6): a transformer that allows NaN and keeps float32
        and float64."""
        from sklearn.utils import InputTags, Tags, TargetTags, TransformerTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=False),
            transformer_tags=TransformerTags(preserves_dtype=["float64", "float32"]),
            input_tags=InputTags(allow_nan=True),
        )

    def _more_tags(self):
        """scikit-learn's tags before 1.6."""
        import numpy

        return {"allow_nan": True, "preserves_dtype": [numpy.float64, numpy.float32]}

    def __repr__(self):
        changed = []
        if not (isinstance(self.feature_range, tuple) and self.feature_range == (0, 1)):
            changed.append(f"feature_range={self.feature_range!r}")
        if self.clip is not False:
            changed.append(f"clip={self.clip!r}")
        return f"MinMaxScaler({', '.join(changed)})"

    def __getstate__(self):
        """An unfitted scaler pickles (and deep-copies) as its parameters; a fitted one cannot: its
        state lives on the GPU (TypeError)."""
        if self.__sklearn_is_fitted__():
            raise TypeError("MinMaxScaler: a fitted scaler cannot be pickled or copied (its state lives on the GPU)")
        return self.get_params()

    def __setstate__(self, state):
        self.__init__(state["feature_range"], clip=state["clip"])

    # fitting

    def _params(self):
        """The checked (lo, hi, clip)."""
        lo, hi = _check_feature_range(self.feature_range)
        return lo, hi, _check_clip(self.clip)

    def _compiled_for_fit(self):
        """The compiled scaler of the current parameters, new when they changed since it was made."""
        params = self._params()
        if self._compiled is None or params != self._compiled_params:
            return _streamkit._MinMaxScaler(*params), params
        return self._compiled, params

    def _expect_fitted(self, what):
        """Raises unless fitted with the current parameters."""
        if not self.__sklearn_is_fitted__():
            raise _not_fitted(what)
        params = self._params()
        if params != self._compiled_params:
            names = [n for n, old, new in zip(("feature_range", "feature_range", "clip"), self._compiled_params, params)
                     if old != new]
            raise ValueError(f"{names[0]}: changed by set_params since the last fit; call fit() to use it")

    def _fitted(self, compiled, params, array, info, rows, reset):
        """Records a successful fit of `rows` rows of `array` (checked as `info`)."""
        n_rows, n_cols, _dtype, on_cuda, device, _fortran = info
        self._compiled, self._compiled_params = compiled, params
        self._place = _place_of(array, on_cuda, device)
        self._fitted_cache = None
        self.n_features_in_ = n_cols
        self.n_samples_seen_ = rows if reset else self.n_samples_seen_ + rows

    def fit(self, X, y=None, *, stream=None):
        """Computes the per-feature minimum and maximum of X (NaN ignored), discarding any earlier fit.

        Parameters
        ----------
        X : array of shape (n_samples, n_features), n_samples ≥ 1, n_features ≥ 1
            float32 or float64, CUDA or host (see the class notes).
        y : None
            Ignored (for scikit-learn).
        stream : None, int, or a stream object
            CUDA arrays: where the fit is enqueued: an object with ``__cuda_stream__``, a CuPy
            stream, a ``torch.cuda.Stream``, or a cudaStream_t as an int (0: the legacy default
            stream). None: the current stream of X's framework (CuPy, torch), else the legacy
            default stream. Host arrays: checked, unused (the call waits).

        Returns
        -------
        self
        """
        compiled, params = self._compiled_for_fit()
        x = _arrays.as_dlpack(X, "X")
        info = _streamkit._matrix_check(x, "X")
        handle = _stream(stream, X, info[3], info[4])
        compiled.fit(x, True, handle)
        self._fitted(compiled, params, X, info, info[0], True)
        return self

    def partial_fit(self, X, y=None, *, stream=None):
        """Folds X into the running per-feature minima and maxima (a first fit when unfitted): fitting
        batches one by one gives bit for bit what one ``fit`` of their concatenation gives.

        Parameters are as in :meth:`fit`; X must have the fitted dtype and n_features, and CUDA
        arrays the fitted device. Returns self.
        """
        if not self.__sklearn_is_fitted__():
            return self.fit(X, stream=stream)
        self._expect_fitted("partial_fit")
        x = _arrays.as_dlpack(X, "X")
        info = _streamkit._matrix_check(x, "X")
        handle = _stream(stream, X, info[3], info[4])
        self._compiled.fit(x, False, handle)
        self._fitted(self._compiled, self._compiled_params, X, info, info[0], False)
        return self

    # transforming

    def _apply(self, X, stream, out, inverse, what):
        self._expect_fitted(what)
        x = _arrays.as_dlpack(X, "X")
        rows, cols, dtype, on_cuda, device, _fortran = _streamkit._matrix_check(x, "X")
        handle = _stream(stream, X, on_cuda, device)
        result = _arrays.empty(X, (rows, cols), dtype, device, on_cuda) if out is None else out
        self._compiled.transform(x, _writable_out(result, "out"), inverse, handle)
        return _arrays.finish(X, (result,), handle, device)[0] if out is None else out

    def transform(self, X, *, stream=None, out=None):
        """Scales X with the fitted values: ``lo + (X - data_min_) * scale_`` per column, clamped to
        ``feature_range`` when ``clip``; NaN stays NaN.

        Parameters
        ----------
        X : array of shape (n_samples, n_features)
            The fitted dtype and n_features; CUDA arrays on the fitted device, or host arrays.
        stream : None, int, or a stream object
            As in :meth:`fit`.
        out : array or None
            Where to write, in place (``out=X`` scales X itself): X's shape, dtype and device, row-
            or column-major (not JAX: immutable). None: a new array in X's framework.

        Returns
        -------
        array of shape (n_samples, n_features)
            ``out``, or the new array.
        """
        return self._apply(X, stream, out, False, "transform")

    def inverse_transform(self, X, *, stream=None, out=None):
        """Undoes the scaling: ``(X - lo) / scale_ + data_min_`` per column (no clipping). Parameters
        and result as in :meth:`transform`."""
        return self._apply(X, stream, out, True, "inverse_transform")

    def fit_transform(self, X, y=None, *, stream=None, out=None):
        """``fit(X)``, then ``transform(X)`` on the same stream (host arrays are copied to the GPU
        once). Parameters as in :meth:`fit` and :meth:`transform`; returns the scaled array."""
        compiled, params = self._compiled_for_fit()
        x = _arrays.as_dlpack(X, "X")
        info = _streamkit._matrix_check(x, "X")
        rows, cols, dtype, on_cuda, device, _fortran = info
        handle = _stream(stream, X, on_cuda, device)
        result = _arrays.empty(X, (rows, cols), dtype, device, on_cuda) if out is None else out
        compiled.fit_transform(x, _writable_out(result, "out"), handle)
        self._fitted(compiled, params, X, info, rows, True)
        return _arrays.finish(X, (result,), handle, device)[0] if out is None else out

    def get_feature_names_out(self, input_features=None):
        """Output feature names, as scikit-learn's one-to-one transformers give them: `input_features`
        (n_features_in_ names), or ``x0, x1, ...``; a NumPy array of str objects."""
        if not self.__sklearn_is_fitted__():
            raise _not_fitted("get_feature_names_out")
        import numpy

        if input_features is None:
            return numpy.asarray([f"x{i}" for i in range(self.n_features_in_)], dtype=object)
        names = list(input_features)
        if len(names) != self.n_features_in_:
            raise ValueError(f"input_features: {len(names)} names for {self.n_features_in_} features")
        return numpy.asarray(names, dtype=object)

    # fitted attributes

    def _fitted_values(self):
        """The five fitted arrays by name, computed once per fit from host copies (as scikit-learn
        computes data_range_ and min_), then placed in the last fit's framework."""
        if not self.__sklearn_is_fitted__():
            raise _not_fitted("its fitted attributes")
        if self._fitted_cache is None:
            import numpy

            n, dtype, _device = self._compiled.describe()
            data_min, data_max, scale = (numpy.empty(n, dtype=dtype) for _ in range(3))
            self._compiled.fitted_into(data_min, data_max, scale)
            self._fitted_cache = _fitted_arrays(data_min, data_max, scale, self._compiled_params[0], self._place)
        return self._fitted_cache

    @property
    def data_min_(self):
        """Per-feature minimum seen (NaN ignored; NaN for an all-NaN feature)."""
        return self._fitted_values()["data_min_"]

    @property
    def data_max_(self):
        """Per-feature maximum seen (NaN ignored; NaN for an all-NaN feature)."""
        return self._fitted_values()["data_max_"]

    @property
    def data_range_(self):
        """Per-feature ``data_max_ - data_min_``."""
        return self._fitted_values()["data_range_"]

    @property
    def scale_(self):
        """Per-feature ``(hi - lo) / data_range_``, a range below 10 × eps counting as 1."""
        return self._fitted_values()["scale_"]

    @property
    def min_(self):
        """Per-feature ``lo - data_min_ * scale_`` (scikit-learn's adjustment)."""
        return self._fitted_values()["min_"]


def normalize_many(arrays, feature_range=(0, 1), out=None):
    """Scales each column of each of many host arrays to `feature_range`, over every visible GPU.

    Each array is fitted and transformed on its own (its own per-column minima and maxima, NaN
    ignored, constant columns to ``lo``, all-NaN columns NaN, as :class:`MinMaxScaler`), host to
    host: arrays are cut into chunks of whole columns that are copied to the GPUs, scaled and copied
    back, overlapping (streamkit's ``dispatch_minmax_normalize`` on the process's shared dispatcher).
    The GIL is released while it runs; the call returns when every result is written.

    Parameters
    ----------
    arrays : list or tuple of 2-D host (NumPy) arrays
        float32 or float64 (each keeps its dtype; a list may mix them: each dtype is one batch), any
        shapes, row- or column-major (C or Fortran order, sliced rows). Arrays with no element come
        back empty (scikit-learn's ``minmax_scale`` would raise). CUDA arrays raise TypeError naming
        ``arrays[i]``: scale them with ``MinMaxScaler().fit_transform``.
    feature_range : (float, float), default (0, 1)
        The interval ``(lo, hi)``, finite, ``lo < hi`` (also in float32 if any array is float32).
    out : list or tuple of host arrays, or None
        ``out[i]`` receives ``arrays[i]`` scaled: same shape and dtype, writable, row- or column-
        major. ``out=arrays`` scales in place. An ``out[i]`` must not overlap any other array of the
        call (not checked). None: new NumPy arrays (Fortran order for Fortran-order inputs).

    Returns
    -------
    list of arrays
        The scaled arrays: ``out``'s, or the new ones.

    Raises
    ------
    TypeError, ValueError
        Bad arguments, naming them (``arrays[3]``, ``out[3]``, ``feature_range``), before anything is
        written.
    RuntimeError
        No GPU is visible, or a chunk failed on a GPU (the message names the array and its columns).
    """
    lo, hi = _check_feature_range(feature_range)
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"arrays: expected a list or tuple of 2-D host arrays, got {type(arrays).__name__}")
    views = [_arrays.as_dlpack(array, f"arrays[{i}]") for i, array in enumerate(arrays)]
    infos = [_streamkit._matrix_check(view, f"arrays[{i}]") for i, view in enumerate(views)]
    for i, (_rows, _cols, _dtype, on_cuda, device, _fortran) in enumerate(infos):
        if on_cuda:
            raise TypeError(
                f"arrays[{i}]: on CUDA device {device}; normalize_many scales host (NumPy) arrays "
                "(MinMaxScaler().fit_transform scales CUDA arrays)"
            )
    if out is None:
        import numpy

        results = [numpy.empty((rows, cols), dtype=dtype, order="F" if fortran else "C")
                   for rows, cols, dtype, _on_cuda, _device, fortran in infos]
    else:
        if not isinstance(out, (list, tuple)):
            raise TypeError(f"out: expected a list or tuple of arrays, got {type(out).__name__}")
        if len(out) != len(arrays):
            raise ValueError(f"out: {len(out)} arrays for {len(arrays)} inputs")
        results = list(out)
    targets = [_writable_out(result, f"out[{i}]") for i, result in enumerate(results)]
    _streamkit._normalize_many(views, targets, lo, hi)
    return results
