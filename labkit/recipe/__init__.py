"""Step 1, resolve: `recipes/<name>/recipe.toml` in, a validated `LanePlan` out.

Schema checks name the file and key path; variants are applied before the plan is frozen; lookup finds a
recipe by folder name or alias.
"""

from labkit.recipe.describe import describe_plan
from labkit.recipe.load import (
    VIEW_MOUNT,
    ClusterSpec,
    DecodePlan,
    EngineSpec,
    LanePlan,
    MeasurePlan,
    ModelSpec,
    Parallel,
    PrefillPlan,
    Recipe,
    StagingSpec,
    find_recipe,
    list_recipes,
    load_plan,
    load_recipe,
    recipes_dir,
    repo_root,
    resolve,
    shell_command,
)
from labkit.recipe.schema import Invalid, absolute_path, file_name, read_toml

__all__ = [
    "VIEW_MOUNT", "ClusterSpec", "DecodePlan", "EngineSpec", "Invalid", "LanePlan", "MeasurePlan", "ModelSpec",
    "Parallel", "PrefillPlan", "Recipe", "StagingSpec", "absolute_path", "describe_plan", "file_name",
    "find_recipe", "list_recipes", "load_plan", "load_recipe", "read_toml", "recipes_dir", "repo_root",
    "resolve", "shell_command",
]
