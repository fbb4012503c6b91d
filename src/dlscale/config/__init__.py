"""Typed configuration: RunConfig (one point) and studies (grids of points)."""

from dlscale.config.run_config import RunConfig, fields_doc
from dlscale.config.study import Study, expand, load_study_file, parse_set

__all__ = ["RunConfig", "Study", "expand", "fields_doc", "load_study_file", "parse_set"]
