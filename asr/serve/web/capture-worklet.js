// AudioWorklet processor: the microphone at the AudioContext's rate in, 16-bit PCM at the
// server's rate out, posted to the page in pieces of `pieceMs` (an ArrayBuffer each, little
// endian as every browser's typed arrays are) with the piece's peak and RMS level.
import { Resampler } from "./resampler.js";

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate, pieceMs } = options.processorOptions;
    // `sampleRate` is the AudioContext's rate (a global of the worklet scope)
    this.resampler = targetRate === sampleRate ? null : new Resampler(sampleRate, targetRate);
    this.piece = new Int16Array(Math.max(1, Math.round((targetRate * pieceMs) / 1000)));
    this.filled = 0;
    this.sumSquares = 0;
    this.peak = 0;
    this.stopped = false;
    this.port.onmessage = (event) => {
      if (event.data === "stop") {
        if (this.resampler) this._push(this.resampler.flush());
        this._post();
        this.port.postMessage({ done: true });
        this.stopped = true;
      }
    };
  }

  _post() {
    if (this.filled === 0) return;
    const pcm = this.piece.slice(0, this.filled);
    this.port.postMessage(
      { pcm: pcm.buffer, peak: this.peak, rms: Math.sqrt(this.sumSquares / this.filled) },
      [pcm.buffer],
    );
    this.filled = 0;
    this.sumSquares = 0;
    this.peak = 0;
  }

  _push(samples) {
    for (let i = 0; i < samples.length; i++) {
      // as asr.serve.protocol.float_to_pcm16: clip to [-1, 32767/32768], scale, round
      const s = Math.min(Math.max(samples[i], -1), 32767 / 32768);
      this.piece[this.filled++] = Math.round(s * 32768);
      this.sumSquares += s * s;
      this.peak = Math.max(this.peak, Math.abs(s));
      if (this.filled === this.piece.length) this._post();
    }
  }

  process(inputs) {
    if (this.stopped) return false;
    const channels = inputs[0];
    if (channels.length === 0) return true; // nothing connected yet
    let mono = channels[0];
    if (channels.length > 1) {
      mono = new Float32Array(mono.length);
      for (const channel of channels) for (let i = 0; i < mono.length; i++) mono[i] += channel[i] / channels.length;
    }
    this._push(this.resampler ? this.resampler.process(mono) : mono);
    return true;
  }
}

registerProcessor("capture-pcm16", CaptureProcessor);
