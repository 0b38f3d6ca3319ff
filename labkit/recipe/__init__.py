"""Step 1, resolve: `recipes/<name>/recipe.toml` in, a validated `LanePlan` out.

Schema checks name the file and key path; variants are applied before the plan is frozen; lookup finds a
recipe by folder name or alias. Modules: plan (the frozen dataclasses), schema (the generic validator),
fields (the recipe format), load (reading + validating, Recipe, resolve), variants (overlays), lookup
(finding recipes), describe (the plan as text).
"""

from labkit.recipe.describe import describe_plan
from labkit.recipe.load import Recipe, load_recipe, resolve
from labkit.recipe.lookup import find_recipe, list_recipes, load_plan, recipes_dir, repo_root
from labkit.recipe.plan import (
    BUILT_MODEL_PREFIX,
    VIEW_MOUNT,
    ClusterSpec,
    DecodePlan,
    EngineSpec,
    LanePlan,
    MeasurePlan,
    ModelSpec,
    Parallel,
    PrefillPlan,
    StagingSpec,
    shell_command,
)
from labkit.recipe.schema import Invalid, absolute_path, file_name, read_toml

__all__ = [
    "BUILT_MODEL_PREFIX",
    "VIEW_MOUNT",
    "ClusterSpec",
    "DecodePlan",
    "EngineSpec",
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
    "file_name",
    "find_recipe",
    "list_recipes",
    "load_plan",
    "load_recipe",
    "read_toml",
    "recipes_dir",
    "repo_root",
    "resolve",
    "shell_command",
]
