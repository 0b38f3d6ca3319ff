"""Step 1, resolve: `recipes/<name>/recipe.toml` in, a validated `LanePlan` out.

Schema checks name the file and key path; variants are applied before the plan is frozen; lookup finds a
recipe by folder name or alias. Modules: plan (the frozen `LanePlan`), specs (its model, engine and cluster
parts), staging (its staging entries), measureplan (what it measures), build (a merged table made a plan,
the recipe hash), launch (the fabric and docker options), schema (the generic validator), names (node, user
and image names), fields (the recipe format), rules (cross-key rules), load (reading + validating, Recipe,
resolve), variants (overlays), lookup (finding recipes), override (`with_nodes`), describe (the plan as
text), sweep (`--over` points, each resolved as a variant), enginefacts (the facts table of each engine kind).
"""

from labkit.recipe.describe import describe_plan
from labkit.recipe.enginefacts import ENGINE_FACTS, EngineFacts, engine_facts
from labkit.recipe.launch import COMPILE_CACHE_ROOT, BindMount, DockerOptions, FabricSpec
from labkit.recipe.load import Recipe, load_recipe, resolve
from labkit.recipe.lookup import find_recipe, list_recipes, load_plan, recipes_dir, repo_root
from labkit.recipe.measureplan import DecodePlan, MeasurePlan, PrefillPlan
from labkit.recipe.names import image_reference, node_name, user_name
from labkit.recipe.override import with_nodes
from labkit.recipe.plan import BUILT_MODEL_PREFIX, LanePlan
from labkit.recipe.schema import Invalid, absolute_path, file_name, read_toml, suggest
from labkit.recipe.specs import ClusterSpec, EngineSpec, ModelSpec, Parallel, shell_command
from labkit.recipe.staging import VIEW_MOUNT, StagingSpec
from labkit.recipe.sweep import SweepAxis, expand, parse_over, resolve_point, short_name

__all__ = [
    "SweepAxis",
    "expand",
    "parse_over",
    "resolve_point",
    "short_name",
    "suggest",
    "BUILT_MODEL_PREFIX",
    "COMPILE_CACHE_ROOT",
    "ENGINE_FACTS",
    "VIEW_MOUNT",
    "BindMount",
    "ClusterSpec",
    "DecodePlan",
    "DockerOptions",
    "EngineFacts",
    "EngineSpec",
    "FabricSpec",
    "Invalid",
    "LanePlan",
    "MeasurePlan",
    "ModelSpec",
    "Parallel",
    "PrefillPlan",
    "Recipe",
    "StagingSpec",
    "absolute_path",
    "describe_plan",
    "engine_facts",
    "file_name",
    "find_recipe",
    "image_reference",
    "list_recipes",
    "load_plan",
    "load_recipe",
    "node_name",
    "read_toml",
    "recipes_dir",
    "repo_root",
    "resolve",
    "shell_command",
    "user_name",
    "with_nodes",
]
