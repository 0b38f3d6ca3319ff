"""labkit: measure what an engine, recipe, speculation or staging change does to an LLM serving lane.

Data flow: recipe.toml --resolve--> LanePlan --stage--> view on nodes --up--> endpoint
--measure--> records --store--> results/<run>/ --report--> tables + plots.
"""

__version__ = "0.1.0"
