// The microphone page: capture -> AudioWorklet (resample to the server's rate, 16-bit PCM)
// -> WebSocket (Wenet runtime protocol) -> partial and final results on the page.
//
// URL options (for checks, not for everyday use):
//   ?rate=N   send PCM at N Hz (declared in the WebSocket URL) instead of the server's rate;
//             the server refuses a rate it does not decode, and the page shows why.

const PIECE_MS = 100; // audio per WebSocket frame, as scripts/client.py sends

const $ = (id) => document.getElementById(id);
const ui = {
  start: $("start"), stop: $("stop"), status: $("status"), finals: $("finals"), partial: $("partial"),
  level: $("level"), levelText: $("level-text"), captureInfo: $("capture-info"),
  echo: $("echo-cancellation"), noise: $("noise-suppression"), gain: $("auto-gain"), continuous: $("continuous"),
};

let session = null;

function setStatus(state, text) {
  ui.status.textContent = text;
  ui.status.dataset.state = state;
  ui.status.classList.toggle("error", state === "error");
}

function seconds(ms) {
  return (ms / 1000).toFixed(2);
}

function showFinal(path, endpoint) {
  if (path.sentence) {
    const item = document.createElement("div");
    item.className = "final";
    item.dataset.sentence = path.sentence;
    const sentence = document.createElement("div");
    sentence.className = "sentence";
    sentence.textContent = path.sentence;
    const words = document.createElement("div");
    words.className = "words";
    for (const piece of path.word_pieces || []) {
      const word = document.createElement("span");
      word.className = "word";
      word.dataset.start = piece.start;
      word.dataset.end = piece.end;
      word.append(piece.word + " ");
      const time = document.createElement("small");
      time.textContent = `${seconds(piece.start)}-${seconds(piece.end)} s`;
      word.append(time);
      words.append(word);
    }
    item.append(sentence, words);
    ui.finals.append(item);
  }
  if (endpoint && path.sentence) {
    const divider = document.createElement("div");
    divider.className = "break";
    divider.textContent = "endpoint: pause detected";
    ui.finals.append(divider);
  }
  ui.partial.textContent = "";
}

function describeMediaError(err) {
  if (err.name === "NotAllowedError") return "Microphone permission was denied.";
  if (err.name === "NotFoundError") return "No microphone was found.";
  if (err.name === "NotReadableError") return "The microphone is busy or cannot be read.";
  return `Cannot open the microphone: ${err.message || err.name}`;
}

class Session {
  constructor() {
    this.queue = []; // PCM pieces captured before the server said it is ready
    this.ready = false;
    this.ended = false; // the end signal was sent
    this.finished = false; // speech_end or failure received: the server is done with us
    this.failed = false;
  }

  async open() {
    setStatus("starting", "Opening the microphone...");
    const config = await (await fetch("config.json", { cache: "no-store" })).json();
    const asked = new URLSearchParams(location.search).get("rate");
    this.targetRate = asked ? Number(asked) : config.sample_rate;
    // Browser processing is off by default: the model never heard its artifacts in training.
    const constraints = {
      echoCancellation: ui.echo.checked, noiseSuppression: ui.noise.checked, autoGainControl: ui.gain.checked,
      channelCount: 1,
    };
    // The context and its worklet first: audio arriving before they are ready would be lost.
    this.context = new AudioContext({ latencyHint: "interactive" });
    await this.context.audioWorklet.addModule("capture-worklet.js");
    try {
      this.media = await navigator.mediaDevices.getUserMedia({ audio: constraints, video: false });
    } catch (err) {
      throw new Error(describeMediaError(err));
    }
    const source = this.context.createMediaStreamSource(this.media);
    this.worklet = new AudioWorkletNode(this.context, "capture-pcm16", {
      numberOfInputs: 1, numberOfOutputs: 1, channelCount: 1, channelCountMode: "explicit",
      processorOptions: { targetRate: this.targetRate, pieceMs: PIECE_MS },
    });
    this.worklet.port.onmessage = (event) => this.onPiece(event.data);
    source.connect(this.worklet);
    this.worklet.connect(this.context.destination); // its output is silence; connected so it is pulled
    const settings = this.media.getAudioTracks()[0].getSettings();
    const onOff = (value) => (value ? "on" : "off");
    ui.captureInfo.textContent =
      `${this.context.sampleRate} Hz -> ${this.targetRate} Hz; echo cancellation ${onOff(settings.echoCancellation)}, ` +
      `noise suppression ${onOff(settings.noiseSuppression)}, auto gain ${onOff(settings.autoGainControl)}`;
    this.connect();
  }

  connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    this.ws = new WebSocket(`${scheme}://${location.host}/?sample_rate=${this.targetRate}`);
    this.ws.binaryType = "arraybuffer";
    this.ws.onopen = () => {
      this.ws.send(JSON.stringify({ signal: "start", nbest: 1, continuous_decoding: ui.continuous.checked }));
    };
    this.ws.onmessage = (event) => this.onReply(JSON.parse(event.data));
    this.ws.onclose = (event) => this.onClose(event);
  }

  onPiece(message) {
    if (message.done) {
      // the worklet's last samples are out: now the end signal
      this.send(JSON.stringify({ signal: "end" }));
      this.ended = true;
      return;
    }
    const dbfs = 20 * Math.log10(Math.max(message.rms, 1e-6));
    ui.level.value = Math.max(dbfs, -90);
    ui.levelText.textContent = message.peak === 0 ? "level: digital silence" : `level: ${dbfs.toFixed(0)} dBFS`;
    this.send(message.pcm);
  }

  send(data) {
    if (this.finished) return;
    if (!this.ready) {
      this.queue.push(data);
    } else if (this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(data);
    }
  }

  onReply(reply) {
    if (reply.status !== "ok") {
      this.fail(`Server error: ${reply.message}`);
      return;
    }
    if (reply.type === "server_ready") {
      this.ready = true;
      setStatus("listening", "Listening... speak now. Press Stop when done.");
      for (const data of this.queue.splice(0)) this.ws.send(data);
    } else if (reply.type === "partial_result") {
      ui.partial.textContent = JSON.parse(reply.nbest)[0]?.sentence ?? "";
    } else if (reply.type === "final_result") {
      const best = JSON.parse(reply.nbest)[0] ?? { sentence: "", word_pieces: [] };
      // a final before the end signal (continuous decoding) is an endpoint
      showFinal(best, !this.ended && ui.continuous.checked);
    } else if (reply.type === "speech_end") {
      this.finished = true;
      setStatus("done", this.ended ? "Done." : "Done: the server ended the utterance at a pause.");
      this.release();
    }
  }

  onClose(event) {
    if (!this.finished) {
      this.fail(`Connection to the server lost (code ${event.code}${event.reason ? `: ${event.reason}` : ""}).`);
    }
  }

  fail(text) {
    this.finished = true;
    this.failed = true;
    setStatus("error", text);
    this.release();
  }

  stop() {
    if (this.ended || this.finished) return;
    setStatus("finishing", "Finishing...");
    this.worklet.port.postMessage("stop");
    for (const track of this.media.getTracks()) track.stop();
  }

  // the server is done with this session (speech end, failure or a closed connection): let go of everything
  release() {
    ui.start.disabled = false;
    ui.stop.disabled = true;
    if (this.media) for (const track of this.media.getTracks()) track.stop();
    if (this.context && this.context.state !== "closed") this.context.close();
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.close();
  }
}

ui.start.addEventListener("click", async () => {
  ui.start.disabled = true;
  ui.finals.replaceChildren();
  ui.partial.textContent = "";
  session = new Session();
  try {
    await session.open();
    ui.stop.disabled = false;
  } catch (err) {
    session.fail(err.message);
  }
});

ui.stop.addEventListener("click", () => {
  ui.stop.disabled = true;
  session?.stop();
});

if (!window.isSecureContext || !navigator.mediaDevices) {
  setStatus("error", "This page needs a secure context (http://127.0.0.1 or https) to open the microphone.");
  ui.start.disabled = true;
} else {
  setStatus("idle", "Ready. Press Start and allow the microphone.");
}
