// The vision-encoder matcher's state and its steps, one concern per file:
//   primitives.cc  linear projections (MatMul[+Add], Gemm, ORT's Reshape-Gemm-Reshape), LayerNorm
//   activation.cc  the MLP activation, identified by evaluating its elementwise subgraph
//   attention.cc   softmax(Q K^T s) V over heads, proven by index replay of the head split/merge
//   head_split.cc  the Q/K/V layout chains back to their projections
//   rotary.cc      rotary embeddings on q and k (rotate_half), tables laid out
//   rotary_probe.cc  rotations split across layouts, found as a region and evaluated
//   block.cc       one pre- or post-LN transformer block along the residual stream, its MLP
//   windows.cc     a windowed encoder: its global blocks' sequence merge, its partitioned stream
//   grid.cc        SAM's ViT-Det blocks on a [B, H, W, C] grid: window partitions by replay
//   rel_pos.cc     SAM's decomposed relative-position bias on the scores
//   embedding.cc   the patch embedding, class token and position embedding
//   registers.cc   register tokens inserted among the embedded tokens
//   closure.cc     the claim's node set: shape arithmetic pulled in, exits, escapes
//   constant_fold.cc  float subgraphs of constants folded (an interpolated position embedding)
//   family.cc      which family the claim is, and the GEMMs it runs (for `plan`)
//   driver.cc      the loop over candidate anchors
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/claim.h"
#include "graph/encoder/canonical.h"
#include "graph/encoder/float_tensor.h"
#include "graph/encoder/grid_tiling.h"
#include "graph/encoder_matcher.h"

namespace npuflow::encoder {

// A refusal: a stable reason key and a detail naming where meaning and graph diverge.
struct Fail {
  std::string reason;
  std::string detail;
};

struct Linear {
  ValueId x = kNoValue;
  DenseRef ref;
  int64_t k = 0, n = 0;
  // ORT's Reshape -> Gemm -> Reshape whose last Reshape is not back to [..., N] (ORT merged the
  // next Reshape, e.g. a fused QKV's [B, T, 3, H, dh] view, into it): a layout op of the chain.
  NodeId reshaped_output = kNoNode;
  // The Reshape that flattens x to [rows, K] in front of such a Gemm: it moves no data, but a
  // chain that ends in x (the head merge) must be replayed through it.
  NodeId flatten = kNoNode;
};

struct Norm {
  ValueId x = kNoValue;
  NormRef ref;
};

// Reshape/Transpose (and scalar Mul/Div) peeled back from a Q, K or V operand to its projection.
struct Chain {
  Linear linear;
  std::vector<NodeId> ops;  // Reshape / Transpose / the selector, forward order
  NodeId selector = kNoNode;
  int split_output = 0;  // which output of a Split selector the chain reads
  ValueId fused = kNoValue;
  // A rotary embedding x cos + rotate_half(x) sin on the way (q and k only): its tables, the
  // halves' Slices, and how many of `ops` come before it (it must see [B, H, T, head_dim]).
  struct Rope {
    ValueId cos = kNoValue, sin = kNoValue;
    NodeId first_half = kNoNode, second_half = kNoNode;  // Slices [0, dh/2) and [dh/2, dh)
    size_t at = 0;
    // ORT's transpose optimizer may move the rotation to another layout of q or k, with
    // constant tables transposed alike: the perm that takes the tables (as rank 4) back to
    // [.., T, head_dim] (set by rotary_fits; empty: none).
    std::vector<int64_t> table_perm;
    // Probed: a rotation written across layouts (ORT moved part of it past a Transpose) whose
    // tables are constants: the region's nodes, its input, and the layout ops of its x * cos
    // branch (in chain.ops at `at`); the canonical [T, head_dim] tables are read off it.
    bool probed = false;
    std::vector<NodeId> region;
    ValueId root = kNoValue, output = kNoValue;
    size_t layout_ops = 0;
    std::vector<float> cos_values, sin_values;
  };
  std::optional<Rope> rope;
};

struct Attention {
  ValueId x = kNoValue;
  DenseRef q, k, v;
  int64_t d = 0;
  int64_t heads = 0;
  std::string heads_source;
  float scale = 1.0f;
  bool fused = false;        // q, k, v are column blocks of one projection
  ValueId bias = kNoValue;   // added to the scaled scores (a padding mask), or none
  bool nan_to_zero = false;  // probabilities that are NaN (a fully masked row) become 0
  ValueId rope_cos = kNoValue, rope_sin = kNoValue;     // a rotary embedding on q and k, or none
  std::vector<int64_t> rope_perm;                       // see Chain::Rope::table_perm
  std::vector<float> rope_cos_values, rope_sin_values;  // probed tables [T, head_dim]
};

// What the embedding found: the stream value the first block reads (before an optional
// pre-encoder LayerNorm), its token count (-1 if symbolic), and the embedding's nodes.
struct Embedding {
  ValueId value = kNoValue;
  int64_t tokens = -1;
  Used used;
};

// The residual stream through the blocks: stream[0] is the first block's input, stream[i] block
// i-1's output.
struct Stack {
  std::vector<ValueId> stream;
  std::optional<Norm> pre;  // a pre-encoder LayerNorm (CLIP)
  Used pre_used, blocks_used;
  // A pre-LN block's first LayerNorm output -> (stream index, norm): read outside too when ORT's
  // CSE merged it with an identical tap norm.
  std::map<ValueId, std::pair<int, NormRef>> norm1_outputs;
};

// A text encoder's embedding: the sum of its lookups (`sum`), the LayerNorm of it that starts the
// stream (`stream`), and that norm's nodes.
struct TextEmbedding {
  ValueId sum = kNoValue;
  ValueId stream = kNoValue;
  Norm norm;
  Used used;
};

class Matcher : public CanonicalGraph {
 public:
  Matcher(const GraphView& graph, const EncoderMatcherOptions& options)
      : CanonicalGraph(graph), options_(options) {}

  // The encoder whose patch embedding is `conv_id`. With from_pixels false, the claim starts at
  // the first block's input and the embedding stays on the CPU EP.
  std::optional<Claim> run(NodeId conv_id, Fail& why, bool from_pixels);

  bool embedding(NodeId conv_id, VisionEncoderClaim& enc, Embedding& out, Fail& why) const;
  // A text encoder (BERT-style) from its token-embedding Gather: the blocks from the embedding
  // LayerNorm's output on, with a padding mask; the embedding itself stays on the CPU EP.
  std::optional<Claim> run_text(NodeId gather, Fail& why);
  std::optional<ValueId> text_stream(NodeId gather, Fail& why) const;
  std::optional<TextEmbedding> text_embedding(NodeId gather, Fail& why) const;
  // Takes the embedding, its LayerNorm and the mask arithmetic into the claim as a tensor program
  // (text.cc): true when the claim is then whole from the ids on; else the claim is unchanged and
  // its note says what stopped it.
  bool take_in_embedding(const TextEmbedding& text, const Stack& s, std::set<NodeId>& claimed,
                         VisionEncoderClaim& enc) const;
  // Register tokens: a token-axis Concat of the `embedded` tokens [0, P), R constant rows and
  // tokens [P, T). Advances `embedded` past it; true with nothing found when there is none.
  bool registers(ValueId& embedded, int64_t hidden, VisionEncoderClaim& enc, Used& used,
                 Fail& why) const;
  // The blocks along the stream from `embedding`, after an optional pre-encoder LayerNorm.
  bool stack(ValueId embedding, int64_t tokens, VisionEncoderClaim& enc, Stack& out,
             Fail& why) const;
  // The claim's node set: the embedding (when from_pixels), the blocks, the shape arithmetic
  // around them and the exit LayerNorms; refuses a node interleaved or a value escaping.
  std::optional<std::set<NodeId>> close_claim(const Embedding& emb, const Stack& s,
                                              bool from_pixels, VisionEncoderClaim& enc,
                                              Fail& why) const;

  // Every constant the kernel indexes per element has exactly the elements it reads.
  bool constants_fit(const VisionEncoderClaim& enc, int64_t tokens, Fail& why) const;

  // Steps, public so the unit tests can probe each accepted form and near miss on its own.
  std::optional<Linear> linear(ValueId y, Used& used, bool allow_reshaped_output = false) const;
  std::optional<Norm> layernorm(ValueId y, Used& used) const;
  // LayerNorms (one op or decomposed) whose input is `x`: their output values.
  std::vector<std::pair<ValueId, Norm>> forward_layernorms(ValueId x, const std::set<NodeId>& skip,
                                                           std::vector<Used>& useds) const;
  // The MLP activation between fc1's output `u` (found) and `z`. With `glu`, a gated form
  // (the activation of one half of u times the other half) is accepted and reported there.
  std::optional<EncoderActivation> activation(ValueId z, ValueId& u, Used& used, Fail& why,
                                              EncoderGlu* glu = nullptr) const;
  // Reshape/Transpose/selector/scalar-scale ops back from `v` to a projection; with allow_rope,
  // one rotary embedding on the way too.
  // `v` is one half of a linear's output along its last axis (Split in two, or a Slice):
  // the linear's output and which half (0 first, 1 second).
  std::optional<std::pair<ValueId, int>> glu_half(ValueId v) const;
  std::optional<Chain> layout_chain(ValueId v, float& scale, Used& used, bool allow_scale,
                                    bool allow_select = true, bool allow_rope = false) const;
  // x cos + rotate_half(x) sin producing `v`: its parts, and x.
  std::optional<Chain::Rope> rotary(ValueId v, ValueId& x, Used& used) const;
  ValueId before_noop_casts(ValueId v) const;
  // The rotation producing `v` found by its region rather than its form (rotary_probe.cc):
  // pushes its x * cos branch's layout ops onto `ops` (backward) and returns x.
  std::optional<Chain::Rope> region_rotary(ValueId v, std::vector<NodeId>& ops, ValueId& x,
                                           Used& used) const;
  // Reads the canonical tables off a region rotation whose input has the layout `root` (the
  // replayed source indices of a [1, T, n] projection; the part at `offset`), and checks the
  // region computes x cos + rotate_half(x) sin with them.
  bool probe_rotary(Chain::Rope& rope, const std::vector<NodeId>& layout_ops,
                    const IndexTensor& root, int64_t heads, int64_t d, int64_t tokens, int64_t n,
                    int64_t offset, Fail& why) const;
  // The chain's rotary embedding acts on [1, heads, T, d/heads] of its part (columns from
  // `offset` of the n-wide projection) and rotates the halves of the head dim.
  bool rotary_fits(Chain& chain, int64_t heads, int64_t d, int64_t tokens, int64_t n,
                   int64_t offset, const ShapeEnv& env, Fail& why) const;
  // A rotation's constant tables as [T, head_dim] data (probed, or laid out); nullopt when they
  // are runtime values.
  std::optional<std::pair<std::vector<float>, std::vector<float>>> canonical_tables(
      const Chain::Rope& rope) const;
  // `table` as the layout chain from `origin` makes it, then transposed by `perm` (rank-aligned),
  // replayed on an index tensor of origin's shape (unknown dims `probe`).
  std::optional<IndexTensor> laid_out_from(ValueId table, ValueId origin,
                                           const std::vector<int64_t>& perm, int64_t probe) const;
  // Two runtime tables are layouts of one value with the same elements in the same places once
  // each is laid out by its own perm.
  bool same_runtime_table(ValueId q, const std::vector<int64_t>& q_perm, ValueId k,
                          const std::vector<int64_t>& k_perm) const;
  // q's and k's rotations use the same tables (one value, or equal constants once laid out).
  bool same_rotary(const Chain::Rope& q, const Chain::Rope& k, Fail& why) const;
  // A constant rotary table laid out as [.., T, head_dim] (through `perm`, when set).
  std::optional<std::pair<std::vector<float>, std::vector<int64_t>>> rotary_table(
      ValueId table, const std::vector<int64_t>& perm) const;
  std::optional<int64_t> heads_of(const std::vector<NodeId>& ops) const;
  // Backward from the output projection `o`: merge heads <- P @ V <- Softmax <- Q @ K^T. With
  // grid_w > 0 the tokens are a grid of rows of grid_w, the projections reading [B, rows, cols, D]
  // (SAM's windows) and the heads merged back to that.
  std::optional<Attention> attention(const Linear& o, int64_t tokens, Used& used, Fail& why,
                                     int64_t grid_w = 0) const;
  std::optional<ValueId> block(ValueId h, int64_t tokens, EncoderLayerRef& layer, Used& used,
                               Fail& why) const;
  // The attention's projections, scale and softmax form into the layer (block() and grid_block()).
  static void take_attention(const Attention& att, EncoderLayerRef& layer);
  // SAM's ViT-Det image encoder from its channels-last patch embedding `conv_id`: the blocks from
  // the [B, H, W, C] token grid on (the embedding stays on the CPU EP).
  std::optional<Claim> run_grid(NodeId conv_id, Fail& why);
  // A pre-LN block on the grid stream `h` whose attention runs in windows of the zero-padded grid
  // or over the whole grid (grid.cc).
  std::optional<ValueId> grid_block(ValueId h, EncoderLayerRef& layer, Used& used, Fail& why) const;
  // The decomposed relative-position bias `bias` added to the scores of `att` over `tiling`'s
  // windows: its tables into `grid` (rel_pos.cc).
  bool grid_rel_pos(ValueId bias, const Attention& att, const GridTiling& tiling, GridRef& grid,
                    Used& used, Fail& why) const;
  // `n` reads a head-split query for the relative-position bias (an Einsum, or a Reshape that
  // only Einsums read): a second reader of q that a grid attention's chain allows.
  bool rel_pos_tap(NodeId n) const;
  // A Reshape producing `v` that regroups a stream of `tokens`-token sequences: with `merge`,
  // [B, T, D] -> [B/g, g T, D] (g consecutive sequences become one, as a windowed encoder's
  // global block does; g may be 1); else back, [B/g, g T, D] -> [B, T, D]. It moves no data. Its
  // input and g.
  struct Regroup {
    ValueId input = kNoValue;
    int64_t group = 1;
  };
  std::optional<Regroup> regroup(ValueId v, int64_t tokens, bool merge) const;
  // The [N, T, D] values computed from `embedded` by data movement alone (a windowed encoder's
  // window partition, register tokens concatenated), nearest first, with their token counts:
  // where the claim may start when the embedding itself leads to no block.
  std::vector<std::pair<ValueId, int64_t>> partitioned_streams(ValueId embedded) const;
  // A residual Add of `branch` to `stream` would broadcast (their known dims differ).
  bool broadcasts(ValueId stream, ValueId branch) const;
  // The MLP branch added to `mid` (the stream after the attention, or its post-LN): fills the
  // MLP's fields of L and returns the block's output.
  std::optional<ValueId> mlp(ValueId mid, int64_t d, EncoderLayerRef& L, Used& used,
                             Fail& why) const;
  // The float value `v` computed from constants alone (constant_fold.cc): layout ops, Concat,
  // Add/Mul and Resizes that keep the shape; the nodes join `used`.
  std::optional<FloatTensor> fold(ValueId v, Used& used, int depth = 0) const;
  // The side operand a Concat/Add receives: a constant, a gathered constant or a runtime value.
  SideRef side(ValueId v, Used& used) const;
  // An Expand of a float constant whose target provably repeats it over the batch alone (its
  // other dims kept): what lets side() read the constant itself for each image.
  bool expands_over_batch(NodeId expand) const;
  // False (with why) if `v` is an Expand of a constant that expands_over_batch does not prove.
  bool expanded_constant_fits(ValueId v, const char* what, const char* reason, Fail& why) const;
  // Pulls in the shape arithmetic around the claim; returns a non-shape node that sits between
  // claimed nodes, or kNoNode.
  NodeId close_over(std::set<NodeId>& claimed) const;

 private:
  std::optional<Linear> gemm_linear(NodeId gemm, Used& used) const;
  bool last_axis_reduce(const NodeInfo& node) const;

  const EncoderMatcherOptions options_;  // a copy: a temporary would leave a reference dangling
  // What the last block() found (block() is const: it reports through these).
  mutable int64_t heads_ = 0;
  mutable std::string heads_source_;
  mutable int64_t hidden_ = 0;
  mutable std::pair<ValueId, NormRef> last_norm1_{kNoValue, {}};
  bool grid_mode_ = false;  // the stack is SAM's: block() matches grid blocks
};

// The element indices a head split reads from a [batch, tokens, stride] projection output's
// columns [offset, offset + d): [batch, heads, tokens, d / heads] in that order, or for keys
// [batch, heads, d / heads, tokens]. What the attention's replays are compared with.
std::vector<int32_t> head_split_indices(int64_t batch, int64_t tokens, int64_t d, int64_t heads,
                                        int64_t stride, int64_t offset, bool keys);

// A Gather of rows of a 2-D float constant by integer ids that are a graph input: a text
// encoder's token embedding.
bool is_token_embedding(const GraphView& g, NodeId n);

// A Conv over non-overlapping patches whose one data consumer `next` transposes it to
// [B, H, W, C]: SAM's ViT-Det patch embedding, a candidate refused as `windowed_vit_det`.
bool is_channels_last_patch_embedding(const GraphView& g, const NodeInfo& conv, NodeId next);

// The claim of a matched encoder: its anchor's name, its node set, its parameters.
Claim encoder_claim(const std::string& anchor, const std::set<NodeId>& nodes,
                    VisionEncoderClaim enc);

// Which family a claimed encoder is, from its discriminators (LayerScale, taps, pre-norm,
// activation, class token).
std::string encoder_family(const VisionEncoderClaim& enc);

// The GEMMs one inference of a claimed encoder runs: what `npuflow plan` prices.
std::vector<GemmWork> encoder_work(const GraphView& graph, const VisionEncoderClaim& enc);

}  // namespace npuflow::encoder
