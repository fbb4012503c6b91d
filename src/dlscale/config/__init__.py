"""Studies: grids of points, their files and repeats; one point's RunConfig is part of the
contract (:mod:`dlscale.contract.run_config`) and re-exported here."""

from dlscale.config.study import Study, expand, load_study_file, parse_set
from dlscale.contract.run_config import RunConfig, fields_doc

__all__ = ["RunConfig", "Study", "expand", "fields_doc", "load_study_file", "parse_set"]
