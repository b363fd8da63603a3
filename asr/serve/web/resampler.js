// Streaming band-limited resampler: any integer rate to any other, through a Kaiser-windowed
// sinc low-pass (cutoff `rolloff` x the lower Nyquist). The page turns the microphone's
// 44.1/48 kHz into the model's 16 kHz with it; dropping samples without the low-pass folds
// 8-24 kHz back onto the speech band.
//
// Output sample n sits at input position p = n * inRate / outRate and is
//     y[n] = sum_k x[k] h(p - k),   h(d) = a sinc(a d) kaiser(d / W),  a = 2 cutoff / inRate,
// W = zeroCrossings / a input samples each side, each phase's taps normalised to sum to 1.
// The ratio is rational (L outputs per M inputs), so the L phases' taps are tabulated once.
// Input before the first sample counts as zeros. tests/serve/test_page.py compares this with a
// float64 NumPy reference of the formula above.

function gcd(a, b) {
  while (b) [a, b] = [b, a % b];
  return a;
}

function besselI0(x) {
  let sum = 1, term = 1;
  for (let k = 1; k < 60; k++) {
    term *= (x / (2 * k)) ** 2;
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum;
}

export class Resampler {
  constructor(inRate, outRate, { zeroCrossings = 32, rolloff = 0.95, beta = 8.6 } = {}) {
    if (!Number.isInteger(inRate) || !Number.isInteger(outRate) || inRate <= 0 || outRate <= 0) {
      throw new RangeError(`sample rates must be positive integers, got ${inRate} -> ${outRate}`);
    }
    const g = gcd(inRate, outRate);
    this.up = outRate / g; // L: outputs per period
    this.down = inRate / g; // M: inputs per period
    const a = (rolloff * Math.min(inRate, outRate)) / inRate;
    const halfWidth = zeroCrossings / a;
    this.k = Math.ceil(halfWidth); // taps each side of p
    const taps = 2 * this.k;
    // table[phase * taps + j]: weight of x[floor(p) - k + 1 + j] when frac(p) = phase / L
    this.table = new Float64Array(this.up * taps);
    const i0Beta = besselI0(beta);
    for (let phase = 0; phase < this.up; phase++) {
      const frac = phase / this.up;
      let sum = 0;
      for (let j = 0; j < taps; j++) {
        const d = frac + this.k - 1 - j;
        const r = d / halfWidth;
        let h = 0;
        if (Math.abs(r) < 1) {
          const sinc = d === 0 ? 1 : Math.sin(Math.PI * a * d) / (Math.PI * a * d);
          h = a * sinc * (besselI0(beta * Math.sqrt(1 - r * r)) / i0Beta);
        }
        this.table[phase * taps + j] = h;
        sum += h;
      }
      for (let j = 0; j < taps; j++) this.table[phase * taps + j] /= sum;
    }
    // input kept from absolute index `start`; it begins with k - 1 zeros before sample 0
    this.buffer = new Float64Array(4096);
    this.length = this.k - 1;
    this.start = -(this.k - 1);
    this.base = 0; // floor(p) of the next output
    this.phase = 0; // L * frac(p) of the next output
    this.consumed = 0; // input samples seen
    this.produced = 0; // output samples made
  }

  _append(input) {
    if (this.length + input.length > this.buffer.length) {
      const keep = this.base - this.k + 1 - this.start; // samples before it no output needs any more
      const needed = this.length - keep + input.length;
      if (needed <= this.buffer.length) {
        this.buffer.copyWithin(0, keep, this.length);
      } else {
        const grown = new Float64Array(Math.max(2 * this.buffer.length, needed));
        grown.set(this.buffer.subarray(keep, this.length));
        this.buffer = grown;
      }
      this.length -= keep;
      this.start += keep;
    }
    this.buffer.set(input, this.length);
    this.length += input.length;
  }

  _emit(limit) {
    const taps = 2 * this.k;
    const out = [];
    // output n needs x up to index base + k
    while (this.base + this.k < this.start + this.length && this.produced < limit) {
      const offset = this.base - this.k + 1 - this.start;
      const row = this.phase * taps;
      let y = 0;
      for (let j = 0; j < taps; j++) y += this.buffer[offset + j] * this.table[row + j];
      out.push(y);
      this.produced++;
      this.phase += this.down;
      this.base += Math.floor(this.phase / this.up);
      this.phase %= this.up;
    }
    return Float32Array.from(out);
  }

  // Float32Array (n,) of the next input samples -> Float32Array of every output now complete.
  process(input) {
    this._append(input);
    this.consumed += input.length;
    return this._emit(Infinity);
  }

  // The outputs still held back at the end of the stream (input after the end counts as zeros):
  // in all, ceil(inputs * outRate / inRate) outputs.
  flush() {
    this._append(new Float64Array(this.k + 1));
    return this._emit(Math.ceil((this.consumed * this.up) / this.down));
  }
}
