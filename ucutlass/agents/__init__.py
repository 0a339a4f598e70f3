"""For LLM agents (issue 18): the versioned JSON feedback of every command, a task prompt per problem and an MCP
server over stdio.

- :mod:`.feedback`: ``feedback-v1.json`` (the schema, package data), the document builders the CLI prints with
  ``--json``, :func:`validate`;
- :mod:`.prompt`: :func:`build_prompt` (the card's sections for the problem's families, the problem, T_SOL, a
  starting program, the feedback format) and :func:`count_tokens` (tiktoken's cl100k_base, offline);
- :mod:`.server`: ``ucutlass mcp`` (imported on demand: it needs the ``mcp`` SDK);
- :mod:`.policy`: the scripted :class:`~.policy.DiagnosticFixer`, :class:`~.policy.StopRule` and the agent loop;
- :mod:`.replay`: stop rules evaluated offline on a tune's recorded trials;
- :mod:`.campaign`: ``ucutlass campaign``, a budget spread over problems by SOL headroom with the stop rules, and its
  replay on recorded tunes; :mod:`.campaign_runners`: the tuner's and an agent policy's attempts.
"""

from .feedback import (COMMANDS, SCHEMA_FILE, SCHEMA_VERSION, FeedbackSchemaError, build_entry, document,
                       error_document, load_schema, schema_errors, tune_document, validate)

__all__ = ["COMMANDS", "SCHEMA_FILE", "SCHEMA_VERSION", "FeedbackSchemaError", "build_entry", "document",
           "error_document", "load_schema", "schema_errors", "tune_document", "validate"]
