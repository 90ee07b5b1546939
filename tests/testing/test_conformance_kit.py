"""The conformance kit (``pipeline.testing``): every built-in stage kind and model passes its
check, the example plugin outside the package passes both, and each check fails, naming what
broke, on a deliberately broken twin."""

from __future__ import annotations

import importlib
import itertools
import pickle
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from pydantic import ConfigDict, Field, field_validator

from pipeline.core.errors import UsageError
from pipeline.backends import get_backend
from pipeline.core.problems import Task
from pipeline.models import MODELS, LinearCoefficientsFormat, ModelSpec, get_model_spec
from pipeline.models.blending import Bagged, Ensemble, EnsembleMember, Stacked, blend, stack_matrix
from pipeline.models.formats import LinearPredictor, SkopsFormat, TorchStateDictFormat, XGBoostJsonFormat
from pipeline.stages import STAGE_KINDS, StageKind, StageSpec
from pipeline.stages.spec import Table
from pipeline.testing import check_model, check_stage_kind
from pipeline.testing.models import tiny_dataset

PLUGIN_DIR = Path(__file__).resolve().parents[1] / "plugin_example"

# Blocks of the built-in kinds whose required values the schema cannot make up (a date, a
# duration, a function path, a non-empty mapping): what a minimal YAML block of each holds.
EXAMPLES: dict[str, dict[str, Any]] = {
    "aggregate": {"by": "customer", "time": "date", "as_of": "2024-01-01", "features": {"orders": "count"}},
    "label": {"by": "customer", "time": "date", "as_of": "2024-01-01", "horizon": "30d",
              "target": {"churn": "no_event"}},
    "python": {"function": "my_project.features:add_ratios"},
}
# Small models keep the check fast; one thread, as the suite shares the machine's cores.
SMALL: dict[str, dict[str, Any]] = {
    "random_forest": {"n_estimators": 5, "n_jobs": 1},
    "xgboost": {"n_estimators": 5, "n_jobs": 1},
}


# ---------------------------------------------------------------- models built elsewhere
def mlp_fitted(task: Task, X: np.ndarray, y: np.ndarray) -> Any:
    """The MLP as the torch stage leaves it (a seeded network of the task's outputs): its file
    format's round trip is what is checked."""
    torch = pytest.importorskip("torch")
    from pipeline.tensors.classifier import MLPClassifier
    from pipeline.tensors.mlp import MLPArchitecture
    from pipeline.tensors.objectives import Objective

    torch.manual_seed(0)
    objective = Objective.for_moments(task, float(y.mean()), float(y.std()))
    arch = MLPArchitecture(n_features=X.shape[1], continuous_index=list(range(X.shape[1])), hidden=[8], dropout=0.0,
                           n_outputs=objective.n_outputs)
    return MLPClassifier(arch.build(), objective=objective)


def ensemble_fitted(task: Task, X: np.ndarray, y: np.ndarray) -> tuple[Ensemble, Any]:
    """An ensemble of a linear model and a forest, as the ensemble stage builds one, and its
    blended scores (an ``Ensemble`` has no predict of its own)."""
    cpu = get_backend("cpu")
    members = []
    for name, model, weight in (("linear", "ridge" if task.kind == "regression" else "logistic_regression", 0.4),
                                ("forest", "random_forest", 0.6)):
        spec = get_model_spec(model)
        kwargs, _ = spec.translate(SMALL.get(model, {}), "cpu", seed=0)
        estimator = cpu.estimator(spec, kwargs, task=task.kind).fit(X, y)
        members.append(EnsembleMember(name, model, estimator, weight, meta={"task": task.to_dict()}))

    def score(rows: np.ndarray) -> np.ndarray:
        return blend([cpu.predict_scores(m.estimator, rows, task) for m in members], [m.weight for m in members])

    return Ensemble(members, task), score


def _fitted_members(task: Task, X: np.ndarray, y: np.ndarray, models: list[tuple[str, str]]) -> list[EnsembleMember]:
    cpu, members = get_backend("cpu"), []
    for name, model in models:
        spec = get_model_spec(model)
        kwargs, _ = spec.translate(SMALL.get(model, {}), "cpu", seed=0)
        members.append(EnsembleMember(name, model, cpu.estimator(spec, kwargs, task=task.kind).fit(X, y),
                                      1.0 / len(models), meta={"task": task.to_dict()}))
    return members


def _linear(task: Task) -> str:
    return "ridge" if task.kind == "regression" else "logistic_regression"


def bagged_fitted(task: Task, X: np.ndarray, y: np.ndarray) -> tuple[Bagged, Any]:
    """A bagged model of two linear members, each fitted on half the rows, as bag_model builds
    one, and its averaged scores."""
    cpu, half = get_backend("cpu"), len(X) // 2
    members = [_fitted_members(task, X[rows], y[rows], [(str(i), _linear(task))])[0]
               for i, rows in enumerate((slice(None, half), slice(half, None)))]
    for member in members:
        member.weight = 0.5

    def score(rows: np.ndarray) -> np.ndarray:
        return blend([cpu.predict_scores(m.estimator, rows, task) for m in members], [0.5, 0.5])

    return Bagged(members, task), score


def stacked_fitted(task: Task, X: np.ndarray, y: np.ndarray) -> tuple[Stacked, Any]:
    """A stack of a linear model and a forest under a bagged linear meta-model (its format's
    round trip is what is checked, so the meta-model fits on the members' scores here)."""
    cpu = get_backend("cpu")
    members = _fitted_members(task, X, y, [("linear", _linear(task)), ("forest", "random_forest")])

    def matrix(rows: np.ndarray) -> np.ndarray:
        return stack_matrix([cpu.predict_scores(m.estimator, rows, task) for m in members], task)

    meta, meta_score = bagged_fitted(task, matrix(X), y)
    stacked = Stacked(members, EnsembleMember("meta", "bagged", meta, 1.0, meta={"task": task.to_dict()}), task=task)
    return stacked, lambda rows: meta_score(matrix(rows))


FITTED = {"mlp": mlp_fitted, "ensemble": ensemble_fitted, "bagged": bagged_fitted, "stacked": stacked_fitted}
# What each built-in format imports to write and read its files.
FORMAT_MODULES = {SkopsFormat: ["skops"], XGBoostJsonFormat: ["xgboost"], TorchStateDictFormat: ["torch"]}


def needed_modules(spec: ModelSpec) -> list[str]:
    """Top-level modules a model's CPU check imports: its CPU estimators', its format's."""
    paths = [spec.class_path("cpu", task=task) for task in spec.tasks]
    if spec.name in ("ensemble", "bagged", "stacked"):
        paths += ["sklearn.linear_model:Ridge", "skops:io"]
    modules = [path.partition(":")[0].split(".")[0] for path in paths if path]
    return sorted(set(modules + FORMAT_MODULES.get(type(spec.format), [])))


# ---------------------------------------------------------------- every built-in passes
@pytest.mark.parametrize("kind", list(STAGE_KINDS))
def test_every_built_in_stage_kind_conforms(kind):
    check_stage_kind(kind, example=EXAMPLES.get(kind))


@pytest.mark.parametrize("name", list(MODELS))
def test_every_built_in_model_conforms(name):
    spec = MODELS[name]
    for module in needed_modules(spec):
        pytest.importorskip(module, reason=f"model '{name}' needs {module}, which is not installed here")
    if not any(spec.class_path("cpu", task=task) for task in spec.tasks) and name not in FITTED:
        pytest.skip(f"model '{name}' has no CPU estimator (GPU only); its check needs fitted=")
    check_model(name, params=SMALL.get(name), fitted=FITTED.get(name))


def test_every_registry_entry_is_covered_by_these_tests():
    """A kind or model added to the package shows up in the parametrised tests above; one the
    schema cannot make an example for, or one with no CPU estimator, needs its entry here."""
    assert set(EXAMPLES) <= set(STAGE_KINDS) and set(FITTED) <= set(MODELS) and set(SMALL) <= set(MODELS)


# ---------------------------------------------------------------- the plugin outside the package
@pytest.fixture
def registries():
    """The registries as they were before the test (a plugin or a twin registers into them)."""
    kinds, models = dict(STAGE_KINDS), dict(MODELS)
    yield
    STAGE_KINDS.clear()
    STAGE_KINDS.update(kinds)
    MODELS.clear()
    MODELS.update(models)


@pytest.fixture
def plugin(registries, monkeypatch):
    """tests/plugin_example/churn_plugin.py imported as a config's ``plugins:`` imports it."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    if "churn_plugin" in sys.modules:
        return importlib.reload(sys.modules["churn_plugin"])
    return importlib.import_module("churn_plugin")


def test_the_plugin_model_joins_the_portfolio_and_init_from_its_own_file(plugin):
    """The centroid plugin's entry says where it stands in auto's portfolio and what init writes
    for it; no package file names it."""
    from pipeline.scaffold.ops_and_models import choose_models
    from pipeline.stages.auto import portfolio_for

    assert "centroid" in [m.label for m in portfolio_for("binary", "auto")]
    assert "centroid" not in [m.label for m in portfolio_for("regression", "auto")]      # it serves binary only
    chosen, _ = choose_models("binary")
    assert ("centroid", {"temperature": 4.0}) in [(name, params) for name, params, _ in chosen]
    assert [name for name, _, _ in chosen][:3] == ["logistic_regression", "random_forest", "xgboost"]


def test_no_stage_config_engine_or_init_module_names_a_model():
    """What a stage knows of a model is in its registry entry (portfolio, init choices, meta-model,
    pruning): a model's name as a string in these packages would be knowledge in the wrong room.
    The composites (ensemble, bagged, stacked) are the stages' own products, named in the registry."""
    import ast

    from pipeline.models.registry import BAGGED_MODEL, ENSEMBLE_MODEL, STACKED_MODEL

    names = set(MODELS) - {BAGGED_MODEL, ENSEMBLE_MODEL, STACKED_MODEL}
    root = Path(__file__).resolve().parents[2] / "pipeline"
    found = [f"{path.relative_to(root)}:{node.lineno} {node.value!r}"
             for package in ("stages", "config", "engine", "scaffold")
             for path in sorted((root / package).rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]
    assert found == []


def test_a_portfolio_member_with_params_its_model_refuses_fails_the_check():
    from pipeline.models import PortfolioMember

    typo = ModelSpec(**{**vars(get_model_spec("logistic_regression")), "name": "typo_logistic",
                        "portfolio": (PortfolioMember("typo_logistic", {"*": {"C_value": 1.0}}),)})
    with pytest.raises(AssertionError, match=r"model 'typo_logistic' fails the conformance check 'roles': "
                                             r"its portfolio member typo_logistic.*C_value"):
        check_model(typo, task="binary")


def test_the_example_plugin_passes_both_checks(plugin):
    check_stage_kind("key_join")
    check_model("centroid")


def test_a_plugin_model_that_claims_a_task_it_cannot_serve_fails(plugin):
    # The centroid model fits two classes; an entry that leaves ``tasks`` at its default
    # (binary and multiclass) is caught scoring three classes with two columns.
    claims = ModelSpec(**{**vars(get_model_spec("centroid")), "tasks": ("binary", "multiclass")})
    with pytest.raises(AssertionError, match=r"model 'centroid' fails the conformance check 'predict \(multiclass\)'"):
        check_model(claims)


# ---------------------------------------------------------------- broken stage kinds
def run_nothing(spec: Any, ctx: Any, inputs: Any) -> None:
    return None


class PairSpec(StageSpec):
    kind: Literal["pair"]
    key: str = Field(description="Key column.")
    how: Literal["inner", "left"] = Field("inner", description="Which rows to keep.")
    min_inputs = 2
    max_inputs = 2


def pair(**changes: Any) -> StageKind:
    """A conforming kind, changed where a test breaks it."""
    settings = {"kind": "pair", "spec": PairSpec, "run": run_nothing, "produces": Table, "accepts": (Table,)}
    return StageKind(**{**settings, **changes})


class LaxSpec(PairSpec):
    model_config = ConfigDict(extra="allow")


class TypeErrorSpec(PairSpec):
    @field_validator("key")
    @classmethod
    def _shape(cls, key: str) -> str:
        if key.startswith("_"):
            raise TypeError("a key starting with _")       # pydantic reports ValueError, not this
        return key


class ForgetfulSpec(PairSpec):
    secret: str = Field("default", exclude=True, description="Not written to the resolved config.")


_counter = itertools.count()


def changing_fingerprint(spec: Any) -> dict[str, int]:
    return {"call": next(_counter)}


def test_a_conforming_twin_passes():
    check_stage_kind(pair())
    assert "pair" not in STAGE_KINDS                      # registered only while it was checked


def test_a_spec_that_does_not_pickle_fails():
    class LocalSpec(PairSpec):                          # defined in a function: workers cannot import it
        pass

    with pytest.raises(AssertionError, match="stage kind 'pair' fails the conformance check 'pickle'") as failed:
        check_stage_kind(pair(spec=LocalSpec))
    assert "does not pickle" in str(failed.value) and "local object" in str(failed.value)


def test_a_registration_that_does_not_pickle_fails():
    with pytest.raises(AssertionError, match="'pickle': the registration does not pickle"):
        check_stage_kind(pair(fingerprint=lambda spec: {}))


def test_a_spec_that_accepts_unknown_keys_fails():
    with pytest.raises(AssertionError, match="'unknown key': the block .* was accepted"):
        check_stage_kind(pair(spec=LaxSpec))


def test_a_validator_that_raises_type_error_fails():
    with pytest.raises(AssertionError, match="'validation raises': .*raised TypeError"):
        check_stage_kind(pair(spec=TypeErrorSpec), invalid={"key": "_hidden"})


def test_an_invalid_value_that_is_accepted_fails():
    with pytest.raises(AssertionError, match="'invalid value': the block .*'key': 'anything'.* was accepted"):
        check_stage_kind(pair(), invalid={"key": "anything"})


def test_a_kind_whose_literal_is_another_name_fails():
    with pytest.raises(AssertionError, match=r"stage kind 'twin' fails the conformance check 'registration': "
                                             r"PairSpec.kind must be declared as kind: Literal\['twin'\]"):
        check_stage_kind(pair(kind="twin"))


@pytest.mark.parametrize("changes,check", [
    ({"produces": "Table"}, "types"),
    ({"accepts": (Table, "FeatureSet")}, "types"),
    ({"resources": frozenset({"tpu"})}, "resources"),
    ({"records": ("status",)}, "records"),
])
def test_a_registration_with_a_wrong_declaration_fails(changes, check):
    with pytest.raises(AssertionError, match=f"stage kind 'pair' fails the conformance check '{check}'"):
        check_stage_kind(pair(**changes))


def test_a_spec_that_loses_a_value_in_the_resolved_config_fails():
    with pytest.raises(AssertionError, match="'resolved config': the resolved config loads back as"):
        check_stage_kind(pair(spec=ForgetfulSpec), example={"key": "id", "secret": "given"})


def test_a_fingerprint_that_changes_between_calls_fails():
    with pytest.raises(AssertionError, match="'fingerprint': equal specs give different fingerprints"):
        check_stage_kind(pair(fingerprint=changing_fingerprint))


def test_an_example_the_schema_cannot_make_asks_for_one():
    with pytest.raises(AssertionError, match=r"'valid block': .*stages\.checked\.function \(line \d+\).*pass example="):
        check_stage_kind("python")


def test_an_unknown_kind_name_fails():
    with pytest.raises(AssertionError, match="stage kind 'no_such_kind' fails the conformance check 'registered'"):
        check_stage_kind("no_such_kind")


def test_a_missing_key_named_like_a_stage_kind_is_reported_at_its_key():
    """``features`` of an aggregate stage is also a stage kind's name: the loader once took it
    for the union's tag and reported ``stages.<stage>: missing required key '<stage>'``."""
    from pipeline.config.loader import load_config
    from pipeline.core.errors import ConfigError

    text = ("name: c\nstages:\n  events: {kind: python, function: 'm:f'}\n"
            "  counts: {kind: aggregate, inputs: [events], by: id, time: date, as_of: '2024-01-01'}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(text=text)
    assert [(i.path, i.message, i.line) for i in refused.value.issues] == [
        ("stages.counts.features", "missing required key 'features'", 4)]


# ---------------------------------------------------------------- broken models
class ForgetfulFormat(LinearCoefficientsFormat):
    """Reads the coefficients back as zeros: the fitted state is lost in the round trip."""

    name = "forgetful"

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Any) -> Any:
        predictor = super().load(folder, meta, backend=backend)
        predictor.coef = np.zeros_like(predictor.coef)
        return predictor


class ModelJsonOnlyFormat(LinearCoefficientsFormat):
    """Scores from the numbers in model.json and never reads its file, so a damaged file loads."""

    name = "model-json-only"

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Any) -> Any:
        return LinearPredictor(np.asarray(meta["coef"], dtype="float64"), np.asarray(meta["intercept"]))


class UnpicklableLogistic:
    """A classifier that keeps a lambda once fitted: it cannot travel to a Dask worker."""

    def __init__(self, C: float = 1.0) -> None:
        self.C = C

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"C": self.C}

    def fit(self, X: Any, y: Any) -> UnpicklableLogistic:
        from sklearn.linear_model import LogisticRegression

        self.model_ = LogisticRegression(C=self.C).fit(X, y)
        self.coef_, self.intercept_, self.classes_ = self.model_.coef_, self.model_.intercept_, self.model_.classes_
        self.squash_ = lambda p: p
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        return self.squash_(self.model_.predict_proba(X))


def logistic(**changes: Any) -> ModelSpec:
    return ModelSpec(**{**vars(get_model_spec("logistic_regression")), "name": "twin", **changes})


def test_a_conforming_model_twin_passes():
    check_model(logistic(), task="binary")
    assert "twin" not in MODELS                           # registered only while it was checked


def test_a_format_whose_round_trip_loses_the_fitted_state_fails():
    with pytest.raises(AssertionError, match=r"model 'twin' fails the conformance check 'file format round trip "
                                             r"\(binary\)': .*differ .* the fitted state was not kept"):
        check_model(logistic(format=ForgetfulFormat()), task="binary")


def test_a_format_that_loads_a_damaged_file_fails():
    with pytest.raises(AssertionError, match=r"'damaged file \(binary\)': a damaged coefficients.json loaded"):
        check_model(logistic(format=ModelJsonOnlyFormat()), task="binary")


def test_a_fitted_estimator_that_does_not_pickle_fails():
    spec = logistic(cpu_class=f"{__name__}:UnpicklableLogistic", params={"C": ("C", "C")}, cpu_defaults={},
                    param_rules=None, adapt_params=None)
    with pytest.raises(AssertionError, match=r"'pickle \(binary\)': pickling the fitted estimator raised"):
        check_model(spec, task="binary")


def test_an_entry_that_does_not_pickle_fails():
    with pytest.raises(AssertionError, match=r"'pickle \(registry entry\)': the registry entry does not pickle"):
        check_model(logistic(param_rules=lambda params: []))


def test_a_gpu_class_that_is_not_a_class_path_fails_without_importing_a_gpu_library():
    imported = "cuml" in sys.modules                    # other tests on a GPU machine may have imported it
    with pytest.raises(AssertionError, match="'API names': gpu_class must be a 'module.path:Class' string"):
        check_model(logistic(gpu_class="cuml.linear_model.LogisticRegression"))
    assert ("cuml" in sys.modules) == imported
    check_model(logistic(), task="binary")              # its well-formed cuML path is not imported either
    assert ("cuml" in sys.modules) == imported


def test_a_parameter_the_cpu_estimator_does_not_have_fails():
    params = {**get_model_spec("logistic_regression").params, "iterations": ("iterations", "max_iter")}
    with pytest.raises(AssertionError, match=r"'build \(binary\)': LogisticRegression has no parameter\(s\) "
                                             r"iterations that the entry passes"):
        check_model(logistic(params=params), task="binary")


def _reports_nothing(report: Any) -> dict[str, Any]:
    return {}


def test_a_pruning_entry_that_reports_nothing_fails_its_check():
    """Tuning prunes a model through its entry's ``pruning``: one whose callback never reports
    would leave every trial unpruned, silently; the check catches it."""
    from pipeline.models import Pruning

    silent = ModelSpec(**{**vars(get_model_spec("xgboost")), "name": "silent_xgboost",
                          "pruning": Pruning("nothing", _reports_nothing)})
    with pytest.raises(AssertionError, match=r"model 'silent_xgboost' fails the conformance check 'pruning': "
                                             r"the fit reported \[\]"):
        check_model(silent, task="binary", params={"n_estimators": 5})


def test_a_task_the_model_does_not_serve_is_refused():
    with pytest.raises(AssertionError, match="'task': task 'regression' is not one it serves"):
        check_model("logistic_regression", task="regression")


def test_an_unknown_model_name_fails():
    with pytest.raises(AssertionError, match="model 'no_such_model' fails the conformance check 'registered'"):
        check_model("no_such_model")


def test_the_failure_names_extension_and_check_and_pickles():
    with pytest.raises(AssertionError) as failed:
        check_model("no_such_model")
    back = pickle.loads(pickle.dumps(failed.value))
    assert (back.extension, back.check) == ("model 'no_such_model'", "registered") and str(back) == str(failed.value)


def test_the_dataset_is_deterministic_and_has_every_class():
    for task in (Task("binary"), Task("multiclass", classes=("a", "b", "c"))):
        X, y = tiny_dataset(task)
        again = tiny_dataset(task)
        assert np.array_equal(X, again[0]) and np.array_equal(y, again[1])
        assert set(y[:60]) == set(y[60:]) == set(range(max(2, len(task.classes))))


# ---------------------------------------------------------------- run hooks
def test_check_hook_names_a_misspelt_event_and_wrong_arguments_and_passes_every_built_in_hook():
    from pipeline.hooks.progress import ConsoleHook, LogHook
    from pipeline.hooks.protocol import HookList, RunHook
    from pipeline.hooks.signature_hook import SigningHook
    from pipeline.testing import check_hook
    from pipeline.testing.failures import ConformanceFailure

    class Misspelt(RunHook):
        def stage_finshed(self, event):            # never called by the runner
            pass

        def summary(self) -> str:                  # a helper of its own: not an event, left alone
            return ""

    class TooFew:
        def stage_finished(self):
            pass

    with pytest.raises(ConformanceFailure, match=r"'event names'.*'stage_finshed' \(did you mean 'stage_finished'\?\)"):
        check_hook(Misspelt)
    with pytest.raises(ConformanceFailure, match=r"'event arguments'.*stage_finished must take 1 argument"):
        check_hook(TooFew())
    # The runner refuses the misspelt one when its hook list is built (before the run starts):
    # a usage error (exit 2), not an internal one.
    with pytest.raises(UsageError, match=r"run hook Misspelt: 'stage_finshed' \(did you mean 'stage_finished'\?\)"):
        HookList([Misspelt()])
    for hook in (ConsoleHook, LogHook, SigningHook, HookList):
        check_hook(hook)
