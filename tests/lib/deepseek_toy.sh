# The toy DeepSeek-V3-style GPT the Megatron conversion tests share (sourced; not a test itself): MLA with
# YaRN, latent norms, a dense first layer, a sigmoid group-limited router with expert bias and scaling, a
# shared expert and one MTP module. Without --q-lora-rank (DeepSeek-V2-Lite's queries); add it for V3's.
deepseek_toy="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16
    --untie-embeddings-and-output-weights --position-embedding-type rope --normalization RMSNorm --norm-epsilon 1e-6
    --swiglu --disable-bias-linear --qk-layernorm --multi-latent-attention --kv-lora-rank 16
    --qk-head-dim 8 --qk-pos-emb-head-dim 8 --v-head-dim 12 --rope-type yarn --rotary-scaling-factor 4 --mscale 0.9
    --mscale-all-dim 0.8 --yarn-original-max-position-embeddings 4 --rotary-base 100 --num-experts 4
    --moe-router-topk 2 --moe-router-score-function sigmoid --moe-router-enable-expert-bias
    --moe-router-bias-update-rate 1e-2 --moe-router-num-groups 2 --moe-router-group-topk 1
    --moe-router-topk-scaling-factor 2.5 --moe-ffn-hidden-size 8 --moe-shared-expert-intermediate-size 16
    --moe-layer-freq [0,1] --moe-router-load-balancing-type none --mtp-num-layers 1 --ffn-hidden-size 48
    --hidden-dropout 0 --attention-dropout 0 --mock-data --tokenizer-type NullTokenizer --vocab-size 40
    --make-vocab-size-divisible-by 8 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1
    --eval-iters 0"
