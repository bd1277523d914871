"""The policy-sampling options that ``tirl data filter-hard`` and ``tirl data curate`` share, defined once.

Each is a typer option whose default comes from :class:`tirl.train.sampler.SamplerConfig`,
:class:`tirl.protocol.config.ProtocolConfig` or :class:`tirl.service.config.ExecutorConfig` (one setting, one
place); both commands use these objects as their parameters' defaults. Importing this module loads no heavy library.
"""

from __future__ import annotations

import typer

from tirl.protocol.config import ProtocolConfig as _P
from tirl.service.config import ExecutorConfig as _X
from tirl.train.sampler import SAMPLER_WORKERS
from tirl.train.sampler import SamplerConfig as _S

MAX_TURNS = typer.Option(_S.max_turns, "--max-turns")
MAX_TOKENS = typer.Option(_S.max_response_tokens, "--max-tokens", help="Response budget, model and tool tokens.")
TEMPERATURE = typer.Option(_S.temperature, "--temperature")
TOOL_TIMEOUT = typer.Option(_S.tool_timeout_s, "--tool-timeout", min=0.1, help="Seconds per tool call.")
PROMPT_STYLE = typer.Option(_P.prompt_style, "--prompt-style",
                            help="full or compact: the prompt the policy was trained with.")
DTYPE = typer.Option("bfloat16", "--dtype")
SANDBOX = typer.Option(_X.backend, "--sandbox", help="'local' or the URL of a code-execution service "
                                                    "(several separated by commas).")
WORKERS = typer.Option(SAMPLER_WORKERS, "--workers", help="Local sandbox workers.")
BATCH_SIZE = typer.Option(_S.batch_size, "--batch-size", help="Largest generation batch.")
SEED = typer.Option(_S.seed, "--seed")
