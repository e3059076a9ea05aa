"""alkit: active learning and uncertainty, from Python.

A thin layer over the Rust library (the same code as the ``alkit`` command line): numpy
arrays in, numpy arrays out, no torch dependency. PyTorch tensors on the CPU are taken
through DLPack (or anything ``numpy.asarray`` reads).

- :func:`score`: one score per item (higher = label first) from a model's probabilities
  ``(n, C)``, its MC-dropout or ensemble draws (baal's ``(n, C, T)`` by default), its
  penultimate features with the last layer, or from an alkit/timm/ONNX checkpoint and a
  data source by path;
- :func:`select` (top-k, random, power, softmax, soft-rank from scores) and
  :func:`select_batch` (BatchBALD, BADGE, core-set, TypiClust, ProbCover), seeded;
- :func:`ood_metrics`, :func:`calibration`, :func:`fit_temperature`, :func:`fit_platt`,
  :func:`conformal`;
- :func:`surface`: uncertainty over the plane on two moons (``alkit surface``), as arrays;
- :func:`curve`: the simulated acquisition loop of ``alkit curve`` (strategies against random
  over seeds) on a data source or on arrays, into a run folder the command line resumes;
- :class:`Session`: a labeling session in the same folder the command line uses;
- :func:`scorers`: every strategy name, as ``alkit scorers`` lists them.

Errors are the exceptions of :mod:`alkit.errors`.
"""

from __future__ import annotations

import json
import os
from typing import (
    TYPE_CHECKING,
    Dict,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    TypedDict,
    Union,
)

import numpy as np

from . import _alkit
from .errors import AlkitError, DataError, FileError, HubError, SettingsError, StateError

__version__: str = _alkit.__version__

__all__ = [
    "score",
    "select",
    "select_batch",
    "ood_metrics",
    "calibration",
    "fit_temperature",
    "fit_platt",
    "surface",
    "SurfaceSettings",
    "conformal",
    "regression_metrics",
    "conformal_intervals",
    "curve",
    "CurveResult",
    "scorers",
    "scorer_settings",
    "ScorerSettings",
    "Scorer",
    "ItemScores",
    "Session",
    "AlkitError",
    "SettingsError",
    "DataError",
    "StateError",
    "FileError",
    "HubError",
]

PathLike = Union[str, "os.PathLike[str]"]

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ScorerSettings(TypedDict, total=False):
    """The scorers' settings, as keyword arguments of :func:`score`, :func:`select_batch` and
    :meth:`Session.query` (and the keys of :func:`curve`'s ``scorer_settings``). The library
    declares them, with their defaults and ranges (:func:`scorer_settings` lists the
    defaults; a test keeps this list equal to the library's); ``alkit score --help`` says
    what each one does. ``lambda_`` stands for ``lambda``, a Python keyword."""

    lambda_: float
    sigma: float
    perturbations: int
    perturb_x_sigma: float
    perturb_theta_sigma: float
    perturb_samples: int
    mc_samples: int
    select: str
    beta: float
    class_balance: bool
    layers: str
    knn_k: int
    vim_dim: Optional[int]
    probcover_delta: Optional[float]
    epig_targets: Optional[int]
    posterior: Optional[str]
    hessian: Optional[str]
    prior_precision: Optional[float]
    inserted_dropout: Optional[float]
    mcaa_epsilon: Optional[float]
    mcaa_samples: Optional[int]
    kernel: Optional[str]
    sketch: Optional[int]
    kernel_transform: Optional[str]
    kernel_mode: Optional[str]
    kernel_sigma: Optional[float]


def scorer_settings() -> Dict[str, object]:
    """Every scorer setting by its library name with its default (``None``: the data
    decides), as the command line's flags have them."""
    return dict(json.loads(_alkit.scorer_settings()))


def _settings_json(settings: Mapping[str, object]) -> Optional[str]:
    """Keyword settings as the JSON object the native module reads into the library's
    settings (``lambda_`` named ``lambda``; numpy scalars as Python numbers), ``None`` for
    none. Names, types and ranges are checked there, once."""
    if not settings:
        return None

    def plain(v: object) -> object:
        v = v.item() if isinstance(v, np.generic) else v
        # JSON has no NaN or infinity: sent as a name, which the library refuses by setting.
        return repr(v) if isinstance(v, float) and not np.isfinite(v) else v

    named = {("lambda" if k == "lambda_" else k): plain(v) for k, v in settings.items()}
    try:
        return json.dumps(named)
    except TypeError as e:
        raise SettingsError(f"scorer settings: {e}", field="scorer_settings") from e


def _array(x: object, name: str) -> np.ndarray:
    """``x`` as a numpy array: a DLPack producer (a CPU torch tensor) without a copy, else
    whatever ``numpy.asarray`` reads."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (BufferError, RuntimeError, TypeError) as e:
            raise DataError(
                f"{name}: cannot read the array through DLPack ({e}); "
                "move it to the CPU (and detach it) first",
                field=name,
            ) from e
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as e:
        raise DataError(f"{name}: not an array ({e})", field=name) from e


def _f32(x: object, name: str, ndim: int) -> np.ndarray:
    """``x`` as a C-ordered float32 array of ``ndim`` axes (no copy when it already is one)."""
    a = _array(x, name)
    if a.ndim != ndim:
        raise DataError(
            f"{name}: expected {ndim} axes, got shape {a.shape}", field=name
        )
    if a.dtype.kind not in "fiub":
        raise DataError(f"{name}: expected numbers, got dtype {a.dtype}", field=name)
    return np.ascontiguousarray(a, dtype=np.float32)


def _floats(x: Union[None, float, Sequence[float]]) -> Optional[List[float]]:
    """One number or several as a list of floats, ``None`` kept."""
    if x is None:
        return None
    return [float(v) for v in (x if isinstance(x, (list, tuple, np.ndarray)) else [x])]


def _f64(x: Optional[object], name: str) -> Optional[np.ndarray]:
    """``x`` as a C-ordered float64 vector, ``None`` kept."""
    if x is None:
        return None
    a = _array(x, name)
    if a.ndim != 1 or a.dtype.kind not in "fiu":
        raise DataError(f"{name}: expected 1 axis of numbers, got shape {a.shape}", field=name)
    return np.ascontiguousarray(a, dtype=np.float64)


def _hint_probs(probs: Optional[object]) -> None:
    """Refuses logits passed as probabilities, saying so (the library would only say that a
    row is not a probability vector)."""
    if probs is None:
        return
    p = np.asarray(probs)
    if p.ndim == 2 and p.size and p.dtype.kind == "f" and np.isfinite(p).all():
        if (p < 0).any() or (np.abs(p.sum(axis=1) - 1) > 1e-3).all():
            raise DataError(
                "probs: the rows are not probabilities (negative values, or none sums to 1): "
                "these look like logits; apply a softmax first, e.g. "
                "scipy.special.softmax(z, axis=1), or pass the last layer's features with "
                "weight= and bias= to score them exactly",
                field="probs",
            )


def _hint_layout(draws: Optional[object], layout: str) -> None:
    """Refuses draws whose class axis is not where ``layout`` says, naming the layout that
    fits (the library would only say that a row is not a probability vector)."""
    if draws is None or layout not in ("nct", "tnc", "ntc"):
        return
    d = np.asarray(draws)
    if d.ndim != 3 or not d.size or d.dtype.kind != "f" or not np.isfinite(d).all():
        return
    class_axis = {"nct": 1, "tnc": 2, "ntc": 2}
    sums = lambda axis: np.abs(d.sum(axis=axis) - 1).max() <= 1e-3  # noqa: E731
    if sums(class_axis[layout]):
        return
    fits = [name for name, axis in (("nct", 1), ("tnc", 2)) if sums(axis)]
    if fits:
        shapes = {"nct": "(n, C, T)", "tnc": "(T, n, C)", "ntc": "(n, T, C)"}
        other = fits[0] if fits[0] != layout else None
        if other:
            raise DataError(
                f"draws: with layout={layout!r} {shapes[layout]} the class axis does not sum to "
                f"1, but axis {class_axis[other]} does: pass layout={other!r} "
                f"{shapes[other]}" + (" or 'ntc' (n, T, C)" if other == "tnc" else ""),
                field="draws",
            )


def _labels(x: object, name: str) -> np.ndarray:
    """Class indices as int64 (integers only: a float label is refused, never truncated)."""
    a = _array(x, name)
    if a.ndim != 1:
        raise DataError(f"{name}: expected 1 axis, got shape {a.shape}", field=name)
    if a.dtype.kind not in "iu":
        raise DataError(
            f"{name}: class indices must be integers, got dtype {a.dtype}", field=name
        )
    if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise DataError(f"{name}: a class index is too large", field=name)
    return np.ascontiguousarray(a, dtype=np.int64)


#: The largest seed (the native module's 64-bit unsigned) and count (a 64-bit size).
_MAX_SEED = 2**64 - 1
_MAX_COUNT = 2**63 - 1


def _counts(**values: Optional[int]) -> None:
    """Refuses a count or seed that is not an integer in its range (``None``: the default),
    naming it, before the native module would raise a bare ``OverflowError``."""
    for name, v in values.items():
        if v is None:
            continue
        top = _MAX_SEED if name == "seed" else _MAX_COUNT
        top_text = "2**64 - 1" if name == "seed" else "2**63 - 1"
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= top:
            raise SettingsError(
                f"{name}: expected an integer from 0 to {top_text}, got {v!r}", field=name
            )


def _opt(x: Optional[object], name: str, ndim: int) -> Optional[np.ndarray]:
    return None if x is None else _f32(x, name, ndim)


class Scorer(NamedTuple):
    """One entry of the registry."""

    name: str
    about: str
    #: True for per-item scorers (:func:`score`); False for strategies that choose a whole
    #: batch (:func:`select_batch`, or ``random``).
    per_item: bool


def scorers() -> List[Scorer]:
    """Every strategy alkit knows, in the order ``alkit scorers`` lists them."""
    return [Scorer(*row) for row in _alkit.registry()]


class ItemScores(Dict[str, np.ndarray]):
    """Scores of a data source's items by name (``float32``, one per item, in the source's
    order), with the items' ``ids`` and their ``indices`` in the source."""

    ids: List[str]
    indices: np.ndarray

    def __init__(
        self, indices: np.ndarray, ids: List[str], columns: Sequence[Tuple[str, np.ndarray]]
    ) -> None:
        super().__init__(columns)
        self.ids = ids
        self.indices = indices


def score(
    scorers: Union[str, Sequence[str]],
    *,
    probs: Optional[object] = None,
    draws: Optional[object] = None,
    layout: str = "nct",
    features: Optional[object] = None,
    weight: Optional[object] = None,
    bias: Optional[object] = None,
    train_features: Optional[object] = None,
    train_labels: Optional[object] = None,
    means: Optional[object] = None,
    variances: Optional[object] = None,
    checkpoint: Union[None, PathLike, Sequence[PathLike]] = None,
    data: Optional[PathLike] = None,
    split: str = "train",
    batch: Optional[int] = None,
    seed: int = 0,
    onnx_features: Optional[str] = None,
    onnx_config: Optional[PathLike] = None,
    input_mean: Union[None, float, Sequence[float]] = None,
    input_std: Union[None, float, Sequence[float]] = None,
    **settings: Unpack[ScorerSettings],
) -> Dict[str, np.ndarray]:
    """One score per item for each scorer (higher = label first), by name.

    From arrays (what your own model gives):

    - ``probs`` ``(n, C)``: ``entropy``, ``margin``, ``least-confidence``;
    - ``draws``: MC-dropout or ensemble predictions, axes as ``layout`` says: ``"nct"``
      ``(n, C, T)`` (baal's), ``"tnc"`` or ``"ntc"``: ``bald``, ``mc-entropy``,
      ``class-variance``, ``variation-ratio``, ``mc-max-prob``, ``epig`` (its targets the
      items themselves, up to ``epig_targets``); the probability scorers then read the mean
      of the draws;
    - ``features`` ``(n, d)`` with the last layer ``weight`` ``(C, d)``, ``bias`` ``(C,)``:
      the gradient scores over that layer in closed form (``regrad``, ``exgrad``,
      ``gradnorm``, ...; named ``<name>@last``) and the post-hoc OOD detectors
      (``energy``, ``max-logit``, ``gen``, ``ash``, ``scale``; with ``train_features`` and
      ``train_labels`` also ``knn``, ``mahalanobis``, ``vim``, ``react``, ``conformal-size``
      and ``la`` (the last-layer Laplace posterior fitted on them: ``hessian``,
      ``prior_precision``); without the last layer only ``knn`` and ``mahalanobis``).

    A regression model's Gaussian predictions: ``means`` and ``variances`` of one shape,
    ``(n,)`` (one prediction), ``(T, n)`` (``T`` draws: ensemble members or MC-dropout
    passes) or ``(T, n, k)`` (``k`` outputs): ``variance`` (total predictive variance),
    ``epistemic`` (the variance of the draws' means), ``aleatoric`` (the mean of their
    variances) and ``gauss-mi`` (the moment-matched mutual information), each summed over
    outputs.

    From files: ``checkpoint`` (an alkit checkpoint, ``hf:timm/...``, an ONNX model; a list
    is an ensemble) and ``data`` (any source ``alkit score`` reads) score the ``split``
    exactly as ``alkit score`` does, and return :class:`ItemScores` (with ``ids``). An ONNX
    model's preprocessing comes from the ``config.json`` beside it, or ``onnx_config``;
    without one, ``input_mean`` and ``input_std`` (one value, or one per channel) give its
    normalisation of pixels in ``[0, 1]`` (``0`` and ``1``: the pixels as they are).

    ``settings`` are the scorers' settings (:class:`ScorerSettings`, e.g. ``lambda_=0.5``,
    ``knn_k=10``): arrays read ``lambda_``, ``knn_k``, ``vim_dim``, ``epig_targets``,
    ``hessian`` and ``prior_precision``; a
    checkpoint on a data source reads all but the selection's. A setting the call does not
    read is refused.
    """
    _counts(batch=batch, seed=seed)
    names = [scorers] if isinstance(scorers, str) else list(scorers)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SettingsError(f"scorers: {', '.join(twice)} named more than once", field="scorers")
    by_path = checkpoint is not None or data is not None
    # A setting the chosen kind of input does not read is refused, never ignored.
    unread = (
        dict(layout=(layout, "nct"))
        if by_path
        else dict(
            split=(split, "train"), batch=(batch, None), seed=(seed, 0),
            onnx_features=(onnx_features, None),
            onnx_config=(onnx_config, None), input_mean=(input_mean, None),
            input_std=(input_std, None),
        )
    )
    for key, (value, default) in unread.items():
        if value != default:
            raise SettingsError(
                f"{key}: only read when scoring "
                + ("arrays" if by_path else "a checkpoint on a data source"),
                field=key,
            )
    if means is not None or variances is not None:
        return _score_gaussian(names, means, variances, by_path, settings, **dict(
            probs=probs, draws=draws, features=features, weight=weight, bias=bias,
            train_features=train_features, train_labels=train_labels,
        ))
    if by_path:
        given = [
            k
            for k, v in dict(
                probs=probs, draws=draws, features=features, weight=weight, bias=bias,
                train_features=train_features, train_labels=train_labels,
            ).items()
            if v is not None
        ]
        if given or checkpoint is None or data is None:
            raise SettingsError(
                "score a checkpoint on a data source (both), or arrays, not both"
                + (f" (arrays given: {', '.join(given)})" if given else ""),
                field="checkpoint",
            )
        cks = [checkpoint] if isinstance(checkpoint, (str, os.PathLike)) else list(checkpoint)
        indices, ids, cols = _alkit.score_data(
            [os.fspath(c) for c in cks], os.fspath(data), names, split=split, batch=batch,
            seed=seed, settings=_settings_json(settings), onnx_features=onnx_features,
            onnx_config=None if onnx_config is None else os.fspath(onnx_config),
            input_mean=_floats(input_mean), input_std=_floats(input_std),
        )
        return ItemScores(indices.astype(np.int64), ids, cols)
    try:
        cols = _alkit.score_arrays(
            names,
            probs=_opt(probs, "probs", 2),
            draws=_opt(draws, "draws", 3),
            layout=layout,
            features=_opt(features, "features", 2),
            weight=_opt(weight, "weight", 2),
            bias=_opt(bias, "bias", 1),
            train_features=_opt(train_features, "train_features", 2),
            train_labels=None if train_labels is None else _labels(train_labels, "train_labels"),
            settings=_settings_json(settings),
        )
    except DataError:
        # Only now, when the library refused the arrays, are they looked at again to say
        # what they look like (logits, another layout): a pass over them costs as much as
        # the scoring, so the scores that succeed never pay for it.
        _hint_probs(probs)
        _hint_layout(draws, layout)
        raise
    return dict(cols)


def _score_gaussian(
    names: List[str],
    means: Optional[object],
    variances: Optional[object],
    by_path: bool,
    settings: Mapping[str, object],
    **others: Optional[object],
) -> Dict[str, np.ndarray]:
    """The regression scores of :func:`score`: Gaussian predictions alone."""
    given = [k for k, v in others.items() if v is not None]
    if means is None or variances is None or given or by_path or settings:
        raise SettingsError(
            "Gaussian predictions are scored from means and variances (both) alone"
            + (f" (also given: {', '.join(given)})" if given else ""),
            field="means",
        )
    m, v = _array(means, "means"), _array(variances, "variances")
    if m.ndim not in (1, 2, 3):
        raise DataError(f"means: shape {m.shape}; expected (n,), (T, n) or (T, n, k)", field="means")
    return dict(
        _alkit.score_gaussian(
            names,
            np.ascontiguousarray(m, dtype=np.float32),
            np.ascontiguousarray(v, dtype=np.float32),
        )
    )


def select(
    scores: object,
    k: int,
    *,
    method: str = "top-k",
    beta: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """``k`` positions (int64) chosen from one score per item, in the order chosen.

    ``method``: ``"top-k"`` (ties: lower position first), ``"random"``, or the stochastic
    selections of Kirsch et al. 2023, ``"power"`` (weights ``score**beta``), ``"softmax"``
    (``exp(beta * score)``) and ``"softrank"`` (``rank**-beta``); random draws come from
    ``seed``."""
    _counts(k=k, seed=seed)
    if isinstance(scores, Mapping):
        # What score() returns: a dict of one array per scorer.
        if len(scores) != 1:
            raise SettingsError(
                f"scores: a dict of {len(scores)} scorers ({', '.join(map(str, scores))}); "
                "select from one: scores[\"NAME\"]",
                field="scores",
            )
        scores = next(iter(scores.values()))
    picks = _alkit.select(_f32(scores, "scores", 1), k, method=method, beta=beta, seed=seed)
    return picks.astype(np.int64)


def select_batch(
    name: str,
    k: int,
    *,
    draws: Optional[object] = None,
    layout: str = "nct",
    features: Optional[object] = None,
    weight: Optional[object] = None,
    bias: Optional[object] = None,
    classes: Optional[int] = None,
    labeled: Optional[object] = None,
    candidates: Optional[int] = None,
    seed: int = 0,
    max_configs: Optional[int] = None,
    **settings: Unpack[ScorerSettings],
) -> np.ndarray:
    """``k`` positions (int64) chosen jointly by a batch selector, in the order chosen.

    - ``"batchbald"`` over ``draws`` (``layout`` as in :func:`score`); with ``candidates``
      it chooses among the best ``candidates`` items by BALD. The joint label configurations
      are enumerated exactly up to ``max_configs`` (512) and sampled beyond (baal samples
      ``T * 500`` each step: pass ``max_configs=T * 500`` for a comparable estimate);
    - ``"badge"`` over ``features`` and the last layer ``weight``, ``bias``;
    - ``"coreset"``, ``"typiclust"``, ``"probcover"`` over ``features``, away from the
      ``labeled`` items' features; without a last layer they choose from the features alone
      (a cold start; ProbCover's radius then needs ``classes`` or ``probcover_delta``);
    - for regression, Holzmüller et al. 2023's rules ``"lcmd"``, ``"bait"``, ``"bait-fb"``,
      ``"maxdet"``, ``"maxdist"``, ``"kmeanspp"``, ``"maxdiag"`` over kernel ``features``
      ``(n, p)`` of the pool (a network's gradient or last-layer features, or any embedding)
      and the ``labeled`` items' ``(m, p)``, as bmdal-reg's ``linear`` base kernel reads them.

    Of the ``settings`` (:class:`ScorerSettings`) a selector reads ``probcover_delta``; the
    regression rules read ``kernel_transform`` (``"train"``: the posterior given the labeled
    items, or ``"none"``), ``kernel_mode`` (``"p"`` or ``"tp"``) and ``kernel_sigma``, each
    defaulting to the paper's recommendation for the rule.
    """
    _counts(k=k, seed=seed, classes=classes, candidates=candidates, max_configs=max_configs)
    picks = _alkit.select_batch(
        name,
        k,
        draws=_opt(draws, "draws", 3),
        layout=layout,
        features=_opt(features, "features", 2),
        weight=_opt(weight, "weight", 2),
        bias=_opt(bias, "bias", 1),
        classes=classes,
        labeled=_opt(labeled, "labeled", 2),
        candidates=candidates,
        seed=seed,
        settings=_settings_json(settings),
        max_configs=max_configs,
    )
    return picks.astype(np.int64)


def ood_metrics(in_scores: object, out_scores: object) -> Dict[str, float]:
    """AUROC, AUPR-in, AUPR-out and FPR@95 (OpenOOD's conventions) of the scores of
    in-distribution and OOD items, higher = more likely OOD."""
    return _alkit.ood_metrics(_f32(in_scores, "in_scores", 1), _f32(out_scores, "out_scores", 1))


def calibration(
    probs: object,
    labels: object,
    scores: Optional[Mapping[str, object]] = None,
) -> Dict[str, object]:
    """Accuracy, ECE and MCE (15 bins), NLL and Brier of ``probs`` ``(n, C)`` for ``labels``;
    with ``scores`` (name -> one score per item), each one's rAULC and misclassification AUROC
    under ``"scorers"`` (``None`` when every item is right, or every one wrong)."""
    pairs = None
    if scores is not None:
        pairs = [(str(n), _f32(s, f"scores[{n!r}]", 1)) for n, s in scores.items()]
    return _alkit.calibration(_f32(probs, "probs", 2), _labels(labels, "labels"), pairs)


def fit_temperature(logits: object, labels: object) -> float:
    """The temperature ``T`` minimising the NLL of ``softmax(logits / T)`` for ``labels``."""
    return _alkit.fit_temperature(_f32(logits, "logits", 2), _labels(labels, "labels"))


def fit_platt(scores: object, positive: object) -> Tuple[float, float]:
    """Platt scaling of a binary classifier's held-out ``scores`` ``(n,)`` (a logit or a
    logit difference) with whether each item is ``positive``: ``(slope, intercept)`` such that
    ``P(positive | s) = sigmoid(slope * s + intercept)``, fitted to Platt's smoothed targets
    (as scikit-learn's ``CalibratedClassifierCV(method="sigmoid")``)."""
    s = _array(scores, "scores")
    y = _array(positive, "positive")
    if s.dtype.kind not in "fiu":
        raise DataError(f"scores: expected real numbers, got dtype {s.dtype}", field="scores")
    if s.ndim != 1 or y.ndim != 1:
        raise DataError(
            f"scores and positive: expected one axis each, got shapes {s.shape} and {y.shape}",
            field="scores",
        )
    if y.dtype.kind not in "bui":
        raise DataError(f"positive: expected booleans, got dtype {y.dtype}", field="positive")
    if y.dtype.kind != "b" and not np.isin(y, (0, 1)).all():
        raise DataError("positive: expected 0 or 1 for each item", field="positive")
    return _alkit.fit_platt(
        np.ascontiguousarray(s, dtype=np.float64), np.ascontiguousarray(y, dtype=bool)
    )


class SurfaceSettings(TypedDict, total=False):
    """The settings of :func:`surface`, as ``alkit surface`` has them (``alkit surface
    --help`` says what each one does and its default; the library declares them once)."""

    model: str
    scorer: Optional[str]
    penalty: str
    points: int
    noise: float
    mc_samples: int
    prior_sigma: float
    members: int
    anchor: float
    steps: int
    seed: int


def surface(
    *,
    beside: Sequence[str] = (),
    out: Optional[PathLike] = None,
    **settings: Unpack[SurfaceSettings],
) -> Dict[str, object]:
    """Uncertainty over the plane on two moons, as ``alkit surface`` computes it: a dict of
    ``model``, ``scorer``, ``accuracy`` (held out), ``auroc_far`` (held-out moons against
    points 2 to 4 away), ``extent`` ``[x_min, x_max, y_min, y_max]``, ``grid`` and
    ``gradient`` ``(200, 200)`` (the score and the magnitude of its input gradient, row 0 at
    the top), ``train_points`` ``(m, 3)`` (x, y, label), and ``beside``: the same dict for
    each model of ``beside`` trained on the same moons, scored by its default. With ``out``,
    the command's files are written there too (``beside.png`` with every model side by side).

    ``model``: ``duq``, ``mlp``, ``platt``, ``mc-dropout``, ``bayes-by-backprop``,
    ``ensemble`` or ``anchored-ensemble``; e.g. Ulmer & Cina's Figure 3:
    ``surface(model="mlp", beside=["platt", "mc-dropout", "bayes-by-backprop", "ensemble",
    "anchored-ensemble"], points=500, noise=0.125)``."""
    if isinstance(beside, str):
        raise SettingsError("beside: expected a list of model names, got one string", field="beside")
    return dict(
        _alkit.surface(
            _settings_json(settings), [str(m) for m in beside], None if out is None else os.fspath(out)
        )
    )


def conformal(
    cal_probs: object,
    cal_labels: object,
    probs: object,
    alpha: float,
    *,
    score: str = "aps",
    raps_lambda: float = 0.01,
    raps_k_reg: int = 5,
    seed: int = 0,
    cal_draws: Optional[object] = None,
    draws: Optional[object] = None,
    mondrian: bool = False,
) -> Tuple[Union[float, np.ndarray], np.ndarray]:
    """Split conformal prediction sets at miscoverage ``alpha``: the threshold calibrated on
    held-out ``cal_probs`` with ``cal_labels``, and the sets of ``probs`` as a boolean mask
    ``(n, C)``. ``inf``: every class is in every set.

    ``score``: ``"lac"``, ``"aps"`` or ``"raps"``. APS and RAPS follow Romano et al. 2020's
    non-randomised rule (a class scores the mass ranked strictly above it): their sets always
    hold the most probable class and cover at least ``1 - alpha``. ``"aps-randomized"`` and
    ``"raps-randomized"`` add ``u`` times the class's own mass, one uniform ``u`` per item
    (``cal_draws`` ``(n_cal,)`` and ``draws`` ``(n,)`` as given, e.g. to match MAPIE's, else
    drawn from ``seed``): coverage ``1 - alpha`` in expectation, and a set may be empty.
    ``"aps-inclusive"`` and ``"raps-inclusive"`` count the class's own mass whole (torchcp's
    ``randomized=False``): on an accurate model the items it is surest of get empty sets.

    ``mondrian=True`` calibrates one threshold per class on that class's calibration items
    (class-conditional coverage: each class's items are covered at least ``1 - alpha`` of
    the time), and returns the thresholds ``(C,)`` (``inf`` where a class has too few
    calibration items: it joins every set) in place of the one threshold."""
    _counts(raps_k_reg=raps_k_reg, seed=seed)
    thresholds, sets = _alkit.conformal(
        _f32(cal_probs, "cal_probs", 2),
        _labels(cal_labels, "cal_labels"),
        _f32(probs, "probs", 2),
        alpha,
        score=score,
        raps_lambda=raps_lambda,
        raps_k_reg=raps_k_reg,
        seed=seed,
        cal_draws=_f64(cal_draws, "cal_draws"),
        draws=_f64(draws, "draws"),
        mondrian=bool(mondrian),
    )
    if mondrian:
        return np.asarray(thresholds, dtype=np.float64), sets
    return float(thresholds[0]), sets


def regression_metrics(
    y: object, mean: object, std: object, levels: Optional[Sequence[float]] = None
) -> Dict[str, object]:
    """How good Gaussian predictions ``mean``, ``std`` ``(n,)`` are for targets ``y``
    ``(n,)``, in the targets' units: ``rmse``, ``mae``, ``nll`` (nats), ``crps``, per level of
    ``levels`` (default 0.5, 0.8, 0.9, 0.95) the ``coverage`` and mean ``width`` of the
    central intervals ``mean ± z std``, ``quantile_calibration_error`` (Kuleshov et al.
    2018), ``spearman`` (rank correlation of ``std`` with the absolute error; ``None`` when
    either is constant), ``ause`` with the ``sparsification`` curve and its oracle (20
    steps; ``None`` when every error is 0)."""
    return _alkit.regression(
        _f64_1d(y, "y"), _f64_1d(mean, "mean"), _f64_1d(std, "std"),
        None if levels is None else [float(v) for v in levels],
    )


def _f64_1d(x: object, name: str) -> np.ndarray:
    a = _array(x, name)
    if a.ndim != 1:
        raise DataError(f"{name}: shape {a.shape}; expected (n,)", field=name)
    return np.ascontiguousarray(a, dtype=np.float64)


def conformal_intervals(
    cal_y: object,
    alpha: float,
    *,
    cal_mean: Optional[object] = None,
    cal_std: Optional[object] = None,
    mean: Optional[object] = None,
    std: Optional[object] = None,
    cal_lower: Optional[object] = None,
    cal_upper: Optional[object] = None,
    lower: Optional[object] = None,
    upper: Optional[object] = None,
    score: str = "absolute",
    cal_groups: Optional[object] = None,
    groups: Optional[object] = None,
) -> Tuple[Dict[Optional[int], float], np.ndarray, np.ndarray]:
    """Split-conformal prediction intervals at miscoverage ``alpha``, calibrated on held-out
    items with targets ``cal_y``: ``"absolute"`` (``mean ± q``; ``cal_mean``, ``mean``),
    ``"normalized"`` (``mean ± q std``; also ``cal_std``, ``std``) or ``"cqr"`` (a quantile
    head's ``[lower - q, upper + q]``; ``cal_lower``, ``cal_upper``, ``lower``, ``upper``).
    ``q`` is the ``ceil((n + 1)(1 - alpha))``-th smallest calibration score (``inf`` when
    that exceeds ``n``). With ``cal_groups`` and ``groups`` (integers), one ``q`` per group
    (Mondrian): a group the calibration items lack gets infinite intervals. Returns the
    thresholds (``{None: q}``, or ``{group: q}``) and the lower and upper bounds."""
    if score == "cqr":
        pairs = (cal_lower, cal_upper, lower, upper)
        names = ("cal_lower", "cal_upper", "lower", "upper")
        unread = dict(cal_mean=cal_mean, cal_std=cal_std, mean=mean, std=std)
    else:
        if score == "absolute":
            if cal_std is not None or std is not None:
                raise SettingsError("std: the absolute score reads the means only", field="std")
            cal_std = np.ones_like(_f64_1d(cal_mean, "cal_mean")) if cal_mean is not None else None
            std = np.ones_like(_f64_1d(mean, "mean")) if mean is not None else None
        pairs = (cal_mean, cal_std, mean, std)
        names = ("cal_mean", "cal_std", "mean", "std")
        unread = dict(cal_lower=cal_lower, cal_upper=cal_upper, lower=lower, upper=upper)
    extra = [k for k, v in unread.items() if v is not None]
    if extra:
        raise SettingsError(f"{', '.join(extra)}: not read by the {score!r} score", field=extra[0])
    missing = [n for n, v in zip(names, pairs) if v is None]
    if missing:
        raise SettingsError(f"the {score!r} score needs {', '.join(missing)}", field=missing[0])
    arrays = [_f64_1d(v, n) for n, v in zip(names, pairs)]
    g = [None if x is None else np.ascontiguousarray(_array(x, n), dtype=np.int64)
         for n, x in (("cal_groups", cal_groups), ("groups", groups))]
    return _alkit.conformal_intervals(
        _f64_1d(cal_y, "cal_y"), *arrays, float(alpha), score=score,
        cal_groups=g[0], groups=g[1],
    )


def _summary_row(row: Tuple) -> Dict[str, object]:
    """One row of ``summary.csv`` as a dict with its column names (NaN or None where the
    file has an empty cell)."""
    (strategy, seeds, acc_mean, acc_std, nll_mean, nll_std, final_acc, final_labels, aubc,
     vs_random, vs_best, verdict) = row
    out: Dict[str, object] = dict(
        strategy=strategy, seeds=seeds, acc_mean=acc_mean, acc_std=acc_std, nll_mean=nll_mean,
        nll_std=nll_std, final_acc=final_acc, final_labels=final_labels, aubc_mean=aubc[0],
        aubc_lo=aubc[1], aubc_hi=aubc[2],
    )
    for name, pair in (("random", vs_random), ("best", vs_best)):
        diff, lo, hi, p = pair if pair is not None else (None, None, None, None)
        out.update({f"vs_{name}": diff, f"vs_{name}_lo": lo, f"vs_{name}_hi": hi, f"p_{name}": p})
    out["verdict"] = verdict
    return out


def _nan_for_none(values: List[Optional[float]]) -> np.ndarray:
    """Floats as an array, NaN where there is none."""
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _recall_rows(rows: List[List[Optional[float]]]) -> np.ndarray:
    """Recall per cycle and class ``(cycles, classes)``, NaN for a class without test items."""
    classes = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), classes), np.nan)
    for i, r in enumerate(rows):
        out[i, : len(r)] = _nan_for_none(r)
    return out


def _stopping(cycles: List[Optional[Tuple[object, ...]]]) -> Dict[str, np.ndarray]:
    names = ("kappa", "changed", "uncertainty", "delta_f")
    return {
        name: _nan_for_none([None if c is None else c[j] for c in cycles])
        for j, name in enumerate(names)
    }


class CurveResult(NamedTuple):
    """What :func:`curve` ran: ``runs`` one dict per strategy and seed (``strategy``,
    ``seed`` and per cycle ``cycle``, ``labeled``, ``acc``, ``nll``, ``balanced_acc`` as
    arrays, and ``recall`` as ``(cycles, classes)``; NaN for a class without test items; the
    stopping measures of ``stopping.csv``, ``kappa``, ``changed``, ``uncertainty`` and
    ``delta_f``, as arrays with NaN where a cycle has none),
    ``summary``
    one dict per strategy as ``summary.csv`` has it (``acc_mean`` and ``nll_mean`` averaged
    over cycles 1.., their standard deviations over seeds, ``final_acc``, ``final_labels``
    (the budget, or fewer where ``stop`` ended runs); the area under the
    ACC curve ``aubc_mean`` with its 95% interval ``aubc_lo``, ``aubc_hi``; the paired
    difference to random ``vs_random`` with its bootstrap interval and Wilcoxon's ``p_random``,
    the same to the best strategy, ``None`` where there is none; and the ``verdict``)."""

    runs: List[Dict[str, object]]
    summary: List[Dict[str, object]]


def curve(
    out: PathLike,
    *,
    data: Optional[PathLike] = None,
    train: Optional[Tuple[object, object]] = None,
    test: Optional[Tuple[object, object]] = None,
    classes: Optional[Sequence[str]] = None,
    scorers: Optional[Union[str, Sequence[str]]] = None,
    model: Optional[str] = None,
    seed: Optional[int] = None,
    seeds: Optional[int] = None,
    initial: Optional[int] = None,
    query: Optional[int] = None,
    cycles: Optional[int] = None,
    steps: Optional[int] = None,
    batch_size: Optional[int] = None,
    lr: Optional[float] = None,
    ensemble: Optional[int] = None,
    subsample: Optional[int] = None,
    cold_start: bool = False,
    balanced_start: bool = False,
    hidden: Optional[Sequence[int]] = None,
    stop: Optional[str] = None,
    scorer_settings: Optional[Mapping[str, object]] = None,
    stream: bool = False,
    jobs: Optional[int] = None,
    force: bool = False,
    resume: bool = False,
) -> CurveResult:
    """Runs ``alkit curve`` into the folder ``out``: from ``initial`` random labels, each
    strategy of ``scorers`` (names as :func:`scorers` lists them; default entropy, REGrad*,
    random) picks ``query`` items per cycle for ``cycles`` cycles, the model (``model``,
    default ``cnn``) retrained from scratch each cycle, for ``seeds`` seeds from ``seed``; the
    test accuracy, NLL, balanced accuracy and recall per class of every cycle are returned and
    written (``curve.csv``, ``summary.csv``, ``batches.csv``, ``recall.csv``,
    ``curve.svg``/``.png`` and, with ``random`` among the scorers, ``vs-random.svg``/``.png``),
    the same bytes as the command line's.

    The data: ``data`` (a source as ``--data`` takes it, default the shipped ``data``), or
    ``train`` and ``test`` as ``(items, labels)`` arrays (items ``(n, d)`` rows, ``(n, h, w)``
    or ``(n, c, h, w)`` images; labels integer class indices, named by ``classes``), saved
    into ``out/arrays.safetensors`` so that the run can be resumed. ``scorer_settings`` sets
    the parameterised scorers (e.g. ``{"lambda": 0.3, "mc_samples": 20}``); ``resume=True``
    continues the run in ``out`` where it stopped (Ctrl-C stops at a safe point), the settings
    given again only if they are the run's own; ``force=True`` starts again over a run.
    ``balanced_start=True`` draws the seed labels class by class (an equal share per class);
    ``hidden`` sizes the hidden layers of an ``mlp`` or ``mlp-dropout`` model (e.g.
    ``[24, 24, 2]``); ``jobs`` runs that many (strategy, seed) runs at once on as many
    threads (default: one per core for the heads on feature vectors), each run's results the
    same whatever the number; ``stop`` (a stopping rule, as ``--stop``) ends each run after the
    first cycle the rule says stop (``summary``'s ``final_labels`` says where, on average)."""
    _counts(
        seed=seed, seeds=seeds, initial=initial, query=query, cycles=cycles, steps=steps,
        batch_size=batch_size, ensemble=ensemble, subsample=subsample, jobs=jobs,
    )
    if hidden is not None:
        hidden = list(hidden)
        for width in hidden:
            _counts(hidden=width)
    if isinstance(scorers, str):
        scorers = [s.strip() for s in scorers.split(",")]

    def split(pair: Optional[Tuple[object, object]], name: str) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        if pair is None:
            return None
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise SettingsError(f"{name}: expected a tuple (items, labels)", field=name)
        items = _array(pair[0], f"{name} items")
        return (_f32(items, f"{name} items", items.ndim), _labels(pair[1], f"{name} labels"))

    if (train is not None or test is not None) and data is not None:
        raise SettingsError("give `data` or `train` and `test`, not both", field="data")
    runs, summary = _alkit.curve(
        os.fspath(out),
        data=None if data is None else os.fspath(data),
        train=split(train, "train"),
        test=split(test, "test"),
        classes=None if classes is None else list(classes),
        scorers=None if scorers is None else list(scorers),
        model=model,
        seed=seed,
        seeds=seeds,
        initial=initial,
        query=query,
        cycles=cycles,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        ensemble=ensemble,
        subsample=subsample,
        cold_start=cold_start,
        balanced_start=balanced_start,
        hidden=hidden,
        stop=stop,
        scorer_settings=None if scorer_settings is None else _settings_json(scorer_settings),
        stream=stream,
        jobs=jobs,
        force=force,
        resume=resume,
    )
    return CurveResult(
        runs=[
            {
                "strategy": name,
                "seed": s,
                "cycle": np.array([r[0] for r in rows], dtype=np.int64),
                "labeled": np.array([r[1] for r in rows], dtype=np.int64),
                "acc": np.array([r[2] for r in rows]),
                "nll": np.array([r[3] for r in rows]),
                "balanced_acc": _nan_for_none([r[4] for r in rows]),
                "recall": _recall_rows([r[5] for r in rows]),
                **_stopping([r[6] for r in rows]),
            }
            for name, s, rows in runs
        ],
        summary=[_summary_row(row) for row in summary],
    )


class Session:
    """A labeling session kept in a folder: the folder ``alkit init`` makes and ``alkit
    query``, ``teach``, ``label`` and ``status`` work on. Each method locks the folder, loads
    the session, does one thing and saves it, so a notebook and the command line (or the
    labeling page) can take turns."""

    def __init__(self, state: PathLike) -> None:
        self._s = _alkit.Session(os.fspath(state))

    @classmethod
    def start(
        cls,
        state: PathLike,
        pool: PathLike,
        *,
        labels: Optional[PathLike] = None,
        classes: Optional[Sequence[str]] = None,
        model: Optional[str] = None,
        steps: int = 500,
        batch_size: Optional[int] = None,
        lr: Optional[float] = None,
        seed: int = 0,
        ensemble: Optional[int] = None,
        stream: bool = False,
        force: bool = False,
        backbone: Optional[str] = None,
        embed_cache: Optional[PathLike] = None,
        stop: Optional[str] = None,
    ) -> "Session":
        """Starts a session in the folder ``state`` on ``pool``, as ``alkit init`` does
        (``pool`` as ``--pool`` takes it: an image folder, an IDX folder, a safetensors, .npy,
        .npz, CSV or Parquet file, ``hf:OWNER/NAME``; ``labels`` a CSV of ``id,label`` seed
        labels). With ``backbone`` (a checkpoint or ``hf:OWNER/NAME``), as ``alkit init
        --backbone``: the pool is embedded once through it into the embeddings cache
        (``embed_cache``, else the command line's default) and each round trains a head
        (``model``, default ``linear``). ``stop`` names the stopping rule whose word
        :meth:`status`, the labeling page and the Label Studio backend pass on
        (``kappa-average``, ``classification-change``, ``overall-uncertainty``, ``delta-f``);
        every rule is measured either way (``status()["stopping"]``)."""
        _counts(steps=steps, batch_size=batch_size, seed=seed, ensemble=ensemble)
        if not isinstance(pool, (str, os.PathLike)):
            raise SettingsError(
                f"pool: a path to a data source, not {type(pool).__name__}; to label arrays, "
                "save them first, e.g. np.savez('pool.npz', features=x, labels=y) (-1: "
                "unlabeled), and start on 'pool.npz'",
                field="pool",
            )
        _alkit.Session.start(
            os.fspath(state),
            os.fspath(pool),
            labels=None if labels is None else os.fspath(labels),
            classes=None if classes is None else list(classes),
            model=model,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            ensemble=ensemble,
            stream=stream,
            force=force,
            backbone=backbone,
            embed_cache=None if embed_cache is None else os.fspath(embed_cache),
            stop=stop,
        )
        return cls(state)

    @property
    def state(self) -> str:
        """The session folder."""
        return os.fspath(self._s.state)

    def query(
        self,
        n: int = 50,
        *,
        scorer: str = "entropy",
        out: Optional[PathLike] = None,
        format: str = "csv",
        include_pending: bool = False,
        subsample: Optional[int] = None,
        stream: bool = False,
        **settings: Unpack[ScorerSettings],
    ) -> List[Dict[str, object]]:
        """Trains on the labeled items and returns the next ``n`` to label, best first, as
        ``alkit query`` does: ``{"id", "index", "score"}`` each (``score`` is ``None`` for
        random picks and joint selectors). With ``out`` the batch is written there too, as CSV
        or (``format="label-studio"``) Label Studio tasks. ``settings`` are the scorers'
        settings and the selection (:class:`ScorerSettings`, e.g. ``select="softmax"``,
        ``beta=2.0``, ``mc_samples=10``)."""
        _counts(n=n, subsample=subsample)
        return self._s.query(
            n,
            scorer=scorer,
            out=None if out is None else os.fspath(out),
            format=format,
            include_pending=include_pending,
            subsample=subsample,
            stream=stream,
            settings=_settings_json(settings),
        )

    def teach(
        self,
        answers: Union[Mapping[str, str], Iterable[Tuple[str, str]], PathLike],
        *,
        stream: bool = False,
    ) -> int:
        """Teaches answers, as ``alkit teach`` does: a mapping or pairs ``id -> class
        name``, or a file (a CSV of ``id,label`` rows, or any Label Studio export with choices:
        JSON, JSON_MIN, CSV or TSV, matched by ``alkit_id``). All are checked before any is
        applied; an answer an item already has is skipped. Returns how many were taught."""
        if isinstance(answers, (str, os.PathLike)):
            return self._s.teach(file=os.fspath(answers), stream=stream)
        raw = list(answers.items()) if isinstance(answers, Mapping) else list(answers)
        pairs = []
        for i, p in enumerate(raw):
            # Integer ids (positions of an array pool) and class labels are what users have:
            # alkit's ids and class names are their decimal text.
            if isinstance(p, (tuple, list)) and len(p) == 2 and all(
                isinstance(v, (str, int, np.integer)) and not isinstance(v, bool) for v in p
            ):
                pairs.append((str(p[0]), str(p[1])))
                continue
            raise DataError(
                f"answers: entry {i} is {p!r}, not an (id, class name) pair (strings or integers)",
                field="answers",
            )
        return self._s.teach(pairs, stream=stream)

    def status(self) -> Dict[str, object]:
        """The session at a glance, as ``alkit status --json`` prints it: ``source``,
        ``pool``, ``labeled``, ``pending``, ``rounds``, ``per_class``, ``last_round``."""
        return json.loads(self._s.status_json())

    def __repr__(self) -> str:
        return f"Session({self.state!r})"
