// decode.mjs - llama.cpp's decode speed on a GGUF file, measured the way
// build/fast/bench and build/fast/bench_batch measure the engine's, so that
// tools/bench_llamacpp.sh can put the two side by side on one machine.
//
//   node decode.mjs MODEL.gguf SEQUENCES STEPS THREADS
//
// llama.cpp is the build that node-llama-cpp ships prebuilt for linux-x64
// (the version pinned in package-lock.json; it picks its CPU kernels at run
// time, e.g. its Zen 4 build on a CPU with AVX-512). One context holds
// SEQUENCES sequences; each gets the same 8-token prompt (its first 7 tokens
// untimed; the 8th is the first step's input), then STEPS decode steps are
// timed. In a step every sequence evaluates its last
// token and samples the next one greedily (logits for every sequence, as the
// engine computes them); node-llama-cpp puts the SEQUENCES tokens of a step
// into one llama_decode batch. Steps run in lockstep: the next starts when
// every sequence has its token.
//
// Prints one line: decode tok/s = SEQUENCES * STEPS / time, and ms per step.
//
//   node decode.mjs MODEL.gguf 1 1 THREADS PROMPT
//
// times a prompt of PROMPT tokens instead (prefill, as build/fast/bench
// --prompt PROMPT does: one call, one sequence, after a warm-up prompt of 8
// tokens in another sequence): PROMPT / time in tok/s.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, seqArg, stepArg, threadArg, promptArg] = process.argv.slice(2);
const sequences = Number(seqArg), steps = Number(stepArg), threads = Number(threadArg);
const prefill = promptArg === undefined ? 0 : Number(promptArg);
if (!modelPath || !(sequences >= 1) || !(steps >= 1) || !(threads >= 1) || !(prefill >= 0 && prefill <= 512)) {
    console.error("usage: node decode.mjs MODEL.gguf SEQUENCES STEPS THREADS [PROMPT <= 512]");
    process.exit(2);
}
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
if (prefill > 0) {
    const context = await model.createContext({sequences: 2, threads, batchSize: 512, contextSize: 2 * (prefill + 16)});
    const [warm, seq] = [context.getSequence(), context.getSequence()];
    await warm.evaluateWithoutGeneratingNewTokens([1, 450, 4996, 17354, 1701, 29916, 432, 17204]);
    const ids = Array.from({length: prefill}, (_, i) => 3 + (i * 7919) % 31000);   // below any vocabulary here
    const t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(ids);
    const seconds = (performance.now() - t0) / 1000;
    console.log(`llama.cpp prefill: ${prefill} tokens, ${threads} threads: ${(prefill / seconds).toFixed(2)} tok/s, ` +
                `${(seconds * 1000).toFixed(1)} ms`);
    await context.dispose();
    await model.dispose();
    process.exit(0);
}
const context = await model.createContext({
    sequences, threads, batchSize: 512, contextSize: sequences * (steps + 16),
});
const seqs = Array.from({length: sequences}, () => context.getSequence());
const prompt = [1, 450, 4996, 17354, 1701, 29916, 432, 17204];   // any ids below the vocabulary size
await Promise.all(seqs.map(s => s.evaluateWithoutGeneratingNewTokens(prompt.slice(0, -1))));

const greedy = {generateNext: {token: true, options: {temperature: 0}}};
let last = seqs.map(() => prompt[prompt.length - 1]);
const t0 = performance.now();
for (let i = 0; i < steps; i++) {
    const out = await Promise.all(seqs.map((s, k) => s.controlledEvaluate([[last[k], greedy]])));
    last = out.map(o => o[0].next.token);
}
const seconds = (performance.now() - t0) / 1000;
console.log(`llama.cpp decode: ${sequences} sequences, ${steps} steps, ${threads} threads: ` +
            `${(sequences * steps / seconds).toFixed(2)} tok/s, ${(seconds * 1000 / steps).toFixed(1)} ms/step`);
await context.dispose();
await model.dispose();
