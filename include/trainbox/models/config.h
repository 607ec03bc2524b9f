// trainbox/models/config.h — the [model] section of the training config.
// (Parsed and documented with every other key in train/config.cpp's table.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainbox::models {

struct ModelConfig {
  std::string name = "mlp";                         // models/registry.h: mlp, cnn, resnet, resnet18, …
  std::vector<std::int64_t> hidden = {128};         // mlp: hidden layer sizes
  std::vector<std::int64_t> channels = {32, 64};    // cnn: conv channels (one per conv layer)
  std::int64_t fc = 128;                            // cnn: width of the hidden fully-connected layer
  std::int64_t width = 64;                          // resnet: channels of the first stage
  std::vector<std::int64_t> blocks = {2, 2, 2, 2};  // resnet: basic blocks per stage (ResNet-18)
  bool sync_batchnorm = false;                      // resnet*: BatchNorm over the global batch (SyncBatchNorm)
  // gpt: the nanoGPT / llm.c GPT-2 shape
  std::int64_t n_layer = 4;
  std::int64_t n_head = 4;
  std::int64_t n_embd = 128;
  std::int64_t block_size = 128;  // context length (tokens)
  double dropout = 0.0;
  bool bias = true;             // biases in Linear and LayerNorm layers
  std::int64_t vocab_size = 0;  // 0: the dataset's (256 for bytes)
  // gpt, resnet*: activation checkpointing (models/activation_checkpoint.h): "none", "blocks"
  // (every block), "every_k" (every activation_checkpointing_every-th block)
  std::string activation_checkpointing = "none";
  std::int64_t activation_checkpointing_every = 2;
  // llama (models/llama.h): the Llama / Qwen2 / Qwen3 / Mistral decoder. n_layer, n_head, n_embd,
  // block_size and vocab_size are the keys above; model.init_from = a Hugging Face folder fills all of
  // these from its config.json (models::read_hf_config), and config.toml then holds them.
  std::int64_t n_kv_head = 0;          // key/value heads (grouped-query attention); 0: n_head
  std::int64_t head_dim = 0;           // 0: n_embd / n_head (Qwen3 sets it)
  std::int64_t intermediate_size = 0;  // SwiGLU width; 0: 8·n_embd/3 rounded up to a multiple of 64
  double rope_theta = 10000.0;
  std::string rope_scaling = "none";               // none, linear, llama3
  double rope_factor = 8.0;                        // linear, llama3
  double rope_low_freq_factor = 1.0;               // llama3
  double rope_high_freq_factor = 4.0;              // llama3
  std::int64_t rope_original_max_position = 8192;  // llama3
  std::int64_t max_position = 0;                   // max_position_embeddings written back; 0: block_size
  double norm_eps = 1e-6;                          // RMSNorm epsilon
  bool tie_embeddings = false;                     // lm_head shares embed_tokens' weight
  bool qkv_bias = false;                           // biases on q/k/v (Qwen2; Llama's attention_bias)
  bool o_bias = false;                             // bias on o_proj (Llama's attention_bias)
  bool qk_norm = false;                            // per-head RMSNorm of q and k (Qwen3)
  std::int64_t sliding_window = 0;                 // attention to the last N positions only (Mistral); 0: all
  std::string hf_architecture;                     // "LlamaForCausalLM", "Qwen2ForCausalLM", …: export's class
  std::vector<std::int64_t> eos_token_ids;         // generation stops at these (generation_config.json)
  std::int64_t bos_token_id = -1;                  // -1: none
  // bert (models/bert.h): BertModel with a masked-LM or a classification head; n_layer, n_head, n_embd,
  // intermediate_size, block_size, vocab_size, norm_eps, max_position, dropout above
  std::string task = "classification";  // classification ([CLS] pooler + classifier) or mlm (the masked-LM head)
  std::int64_t num_labels = 0;          // classification: 0 = the dataset's classes
  std::int64_t type_vocab_size = 2;     // token-type (segment) embeddings
  std::int64_t pad_token_id = 0;        // masked out of attention
  // any model: initial weights from a safetensors file with PyTorch state_dict names
  std::string init_from;
  // llama: LoRA (models/lora.h), PEFT's LoRA: low-rank adapters on the Linear layers named in
  // lora_target_modules, every other weight frozen (no gradient, no optimizer state, no all-reduce)
  std::int64_t lora_r = 0;  // the adapters' rank; 0: none (a full fine-tune)
  double lora_alpha = 8;    // scale alpha / r (alpha / sqrt(r) with lora_rslora); PEFT's default
  double lora_dropout = 0;  // dropout on the adapters' input
  std::vector<std::string> lora_target_modules = {"q_proj", "v_proj"};  // PEFT's default for llama
  bool lora_rslora = false;
  std::string lora_init_from;       // a PEFT adapter folder (adapter_config.json, adapter_model.safetensors)
  std::string base_dtype = "fp32";  // with LoRA: the frozen weights' dtype (fp32, bf16, fp16)
  // llama: a mixture of experts in every layer's MLP (models/llama.h: Mixtral's and Qwen3-MoE's sparse block)
  std::int64_t moe_experts = 0;            // experts per layer (num_local_experts / num_experts); 0: a dense MLP
  std::int64_t moe_top_k = 2;              // experts each token is routed to (num_experts_per_tok)
  std::int64_t moe_intermediate_size = 0;  // each expert's SwiGLU width; 0: intermediate_size (Mixtral's)
  bool moe_norm_topk = true;               // the top-k weights renormalised to sum to 1 (Qwen3-MoE's norm_topk_prob)
  bool moe_aux_loss = true;                // the load-balancing loss added in training (output_router_logits)
  double moe_aux_loss_coef = 0.001;        // its coefficient (router_aux_loss_coef)
  double moe_collapse_share = 0.9;         // a warning when one expert takes more than this share of a layer's tokens
};

}  // namespace trainbox::models
