"""Config: pydantic models of the YAML, loading with line-numbered errors, overrides, schema."""

from pipeline.config.loader import apply_overrides, dump_config, load_config
from pipeline.config.schema import PipelineConfig, json_schema

__all__ = ["PipelineConfig", "apply_overrides", "dump_config", "json_schema", "load_config"]
