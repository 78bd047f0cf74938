"""The one builder: walks a ModelConfig top-down into the ledger, mirroring model/.

Each module here mirrors the model/ file of the same name, and each class in it mirrors the model/ class of the same name: its constructor declares the
parameters and buffers in the order model/ registers them (so the ledger's parameter
names are the state-dict keys, in order), and calling it runs the forward pass's ops, in
the order model/ runs them, on accounting.trace's symbolic tensors. Every op emits its
facts as it runs (FLOPs, saved tensors, KV cache, module path); ledger.py only collects.
Where the spec switches a feature, both this file and model/ branch on the same field.
"""
from accounting.ledger.builder.common import (  # noqa: F401  (the tables' component names)
    ACTIVATION_COMPONENT, ALIBI, ATTN_SCALE, BIAS, CAUSAL_MASK, ELEMENTWISE_ORDER, NORM_PARAMS,
    POSITION_ADD, QK_NORM, RESIDUAL, ROPE, ROUTER, SOFTMAX, EMBED_SCALE, SOFTCAP, RESIDUAL_SCALE,
    LOGIT_SCALE, TEMPERATURE)
from accounting.ledger.builder.transformer import walk  # noqa: F401
