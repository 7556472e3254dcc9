"""Exports one real-size encoder (random weights, fixed seed, nothing downloaded) for
bench/encoders.py, in the fixtures venv (`bash tools/fixtures/venv.sh` prints it):

    python bench/export_models.py vision vit OUT.onnx     # vit clip siglip dinov2 depth_anything
    python bench/export_models.py bert 128 OUT.onnx       # BERT-base at 128 (or 512) tokens
    python bench/export_models.py modernbert large:512 OUT.onnx  # ModernBERT-large, 512 tokens
    python bench/export_models.py modernbert mmbert:58 OUT.onnx  # mmBERT-base, 58 tokens

Vision encoders come from tools/fixtures/export_vision.py's real configurations (TorchScript
exporter, encoder-only where the family has that variant), so the bench measures what the
fixtures describe.
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "fixtures"))


class LastHidden(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def export_bert(tokens: int, out: str):
    from transformers import BertConfig, BertModel
    torch.manual_seed(1234)
    model = LastHidden(BertModel(BertConfig(attn_implementation="eager")).eval())
    ids = torch.randint(0, 30522, (1, tokens))
    mask = torch.ones(1, tokens, dtype=torch.int64)
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask), out, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False)


# The encoders of seed 000's ModernBERT table (answerdotai/ModernBERT-large, jhu-clsp/mmBERT-base)
# at their real widths and depths. The vocabulary is cut to 1000 rows: the embedding is a gather,
# priced by bytes, and the full tables would only make the files large.
MODERNBERT = {
    "large": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                  intermediate_size=2624),
    "mmbert": dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                   intermediate_size=1152),
}


def export_modernbert(what: str, out: str):
    from transformers import ModernBertConfig, ModernBertModel
    name, tokens = what.split(":")
    torch.manual_seed(1234)
    config = ModernBertConfig(**MODERNBERT[name], vocab_size=1000, max_position_embeddings=8192,
                              global_attn_every_n_layers=3, local_attention=128,
                              hidden_activation="gelu", attn_implementation="eager",
                              pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                              sep_token_id=2)
    model = LastHidden(ModernBertModel(config).eval())
    ids = torch.randint(3, 1000, (1, int(tokens)))
    mask = torch.ones(1, int(tokens), dtype=torch.int64)
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask), out, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False)


def export_vision(family: str, out: str):
    import export_vision as ev
    makers, sizes = ev.full_configs("eager")
    encoder_only = family != "depth_anything"
    module = ev.build(makers[family], family, encoder_only, sizes[family])
    ev.export(module, sizes[family], ev.output_names(family, encoder_only), Path(out),
              "torchscript")


def main():
    kind, what, out = sys.argv[1], sys.argv[2], sys.argv[3]
    if kind == "bert":
        export_bert(int(what), out)
    elif kind == "modernbert":
        export_modernbert(what, out)
    else:
        export_vision(what, out)


if __name__ == "__main__":
    main()
