"""Step 1, resolve: `recipes/<name>/recipe.toml` in, a validated `LanePlan` out.

Schema checks name the file and key path; variants are applied before the plan is frozen; lookup finds a
recipe by folder name or alias. Modules: plan (the frozen `LanePlan`), specs (its model, engine and cluster
parts), staging (its staging entries), measureplan (what it measures, and `WorkloadTable`, an optional
workload's recipe half), contentplan (its prompt content), sessionplan (its agentic sessions and idle turns),
depthplan (its context depths), canaryplan (its slow-state canary), loadplan (its load levels and their SLO),
interferenceplan (prefill under decode), workloads (the workload tables by [measure]
key, which the schema, build, rules and description read), build (a merged table made a plan,
the recipe hash), launch (the fabric and docker options), schema (the generic validator), names (node, user
and image names), fields (the recipe format), rules (cross-key rules), load (reading + validating, Recipe,
resolve), variants (overlays), lookup (finding recipes), override (`with_nodes`, `with_prefill`, `with_content`, `with_depth`, `with_agentic`, `with_load`), describe (the plan as
text), sweep (`--over` points, each resolved as a variant), enginefacts (the facts table of each engine kind),
topology (switch or ring cabling, and the NCCL mesh set a ring needs).
"""

from labkit.recipe.depthplan import DepthPlan
from labkit.recipe.describe import describe_plan, lane_warnings
from labkit.recipe.enginefacts import ENGINE_FACTS, EngineFacts, engine_facts
from labkit.recipe.interferenceplan import (
    INTERFERENCE_MEASURES,
    INTERFERENCE_TABLE,
    STREAM_PROMPT_TOKENS,
    InterferencePlan,
)
from labkit.recipe.load import Recipe, load_recipe
from labkit.recipe.loadplan import LOAD_TABLE, SLO_TABLE, LoadLoop, LoadPlan, SloPlan
from labkit.recipe.lookup import (
    alias_clashes,
    checkout,
    checkout_note,
    find_recipe,
    list_recipes,
    recipe_named,
    repo_root,
)
from labkit.recipe.measureplan import Api, DecodePlan, MeasurePlan, PrefillPlan
from labkit.recipe.names import user_name
from labkit.recipe.override import (
    endpoint_load,
    with_agentic,
    with_content,
    with_depth,
    with_load,
    with_nodes,
    with_prefill,
)
from labkit.recipe.plan import BUILT_MODEL_PREFIX, LanePlan
from labkit.recipe.schema import Invalid, absolute_path, file_name, read_toml, suggest
from labkit.recipe.specs import EngineSpec
from labkit.recipe.staging import StagingSpec
from labkit.recipe.sweep import SweepAxis, expand, parse_over, resolve_point
from labkit.recipe.topology import mesh_env, ring_advice
from labkit.recipe.workloads import plan_record

__all__ = [
    "BUILT_MODEL_PREFIX",
    "ENGINE_FACTS",
    "INTERFERENCE_MEASURES",
    "INTERFERENCE_TABLE",
    "LOAD_TABLE",
    "SLO_TABLE",
    "STREAM_PROMPT_TOKENS",
    "Api",
    "DecodePlan",
    "DepthPlan",
    "EngineFacts",
    "EngineSpec",
    "InterferencePlan",
    "Invalid",
    "LanePlan",
    "LoadLoop",
    "LoadPlan",
    "MeasurePlan",
    "PrefillPlan",
    "Recipe",
    "SloPlan",
    "StagingSpec",
    "SweepAxis",
    "absolute_path",
    "alias_clashes",
    "checkout",
    "checkout_note",
    "describe_plan",
    "endpoint_load",
    "engine_facts",
    "expand",
    "file_name",
    "find_recipe",
    "lane_warnings",
    "list_recipes",
    "load_recipe",
    "mesh_env",
    "parse_over",
    "plan_record",
    "read_toml",
    "recipe_named",
    "repo_root",
    "resolve_point",
    "ring_advice",
    "suggest",
    "user_name",
    "with_agentic",
    "with_content",
    "with_depth",
    "with_load",
    "with_nodes",
    "with_prefill",
]
