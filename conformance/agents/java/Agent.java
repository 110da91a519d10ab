// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * Conformance agent for sdk-java: speaks spec/CONFORMANCE.md's protocol on stdin/stdout and drives the
 * public Java API (dev.morpheus) as an application would. The backend is the one the JVM is started
 * with (-Dmorpheus.backend=ffm|jni): agent.toml here is the java-ffm column (JDK 25), ../java-jni the
 * java-jni column (JDK 17). Every request runs on the main thread, which is the worker thread. The Java
 * API has only the synchronous checkpoint; it offers the explicit yield (Worker.recordExplicitYield) and the
 * mode clock tests set (Morpheus.setModeClockForTesting), so the optional ops `explicit_yield` and
 * `mode_clock` are its.
 *
 * The Java API attaches and registers in one call: `attach` validates with Morpheus.checkRegion (the
 * header checks of SCB.md §1.3, writing nothing) and remembers the path; `register` maps it again.
 */

import dev.morpheus.Morpheus;
import dev.morpheus.MorpheusException;
import dev.morpheus.Options;
import dev.morpheus.Worker;
import dev.morpheus.abi.Abi;
import dev.morpheus.abi.ErrorCode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;

public final class Agent {
    private static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true,
            StandardCharsets.UTF_8);

    /** Sentinel for "the key is absent". */
    private static final Object ABSENT = new Object();

    private boolean attached;
    /** The path `attach` accepted; null: discovered (register discovers again); "": detached. */
    private String regionPath = "";
    private Worker worker;

    public static void main(String[] args) throws IOException {
        System.setOut(new PrintStream(System.err, true, StandardCharsets.UTF_8)); // nothing else on stdout
        OUT.println("{\"protocol\":\"morpheus-conformance\",\"version\":1,\"sdk\":\"java-" + Morpheus.backendName()
                + "\",\"runtime_kind\":\"JAVA\",\"abi_major\":" + Abi.ABI_MAJOR + ",\"abi_minor\":" + Abi.ABI_MINOR
                + ",\"checkpoint_modes\":[\"sync\"],\"state_fields\":[\"escapable\",\"priority\"],\"attach_maps\":false,"
                + "\"ops\":[\"explicit_yield\",\"mode_clock\"],\"pid\":"
                + ProcessHandle.current().pid() + "}");
        Agent agent = new Agent();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> request;
            try {
                request = Json.parse(line);
            } catch (IllegalArgumentException e) {
                OUT.println(error(-1, "BAD_REQUEST", e.getMessage()));
                continue;
            }
            long id = request.get("id") instanceof Long ? (Long) request.get("id") : -1;
            Object op = request.get("op");
            if ("exit".equals(op)) {
                break;
            }
            String reply;
            try {
                reply = op instanceof String ? agent.handle(id, (String) op, request) : error(id, "BAD_REQUEST", "no op");
            } catch (MorpheusException e) {
                reply = error(id, e.code().name(), e.getMessage());
            } catch (AgentError e) {
                reply = error(id, e.code.name(), e.getMessage());
            } catch (BadRequest e) {
                reply = error(id, "BAD_REQUEST", e.getMessage());
            }
            OUT.println(reply);
        }
        // Exit without shutting the worker down (CONFORMANCE.md: exit).
        Runtime.getRuntime().halt(0);
    }

    private static final class BadRequest extends RuntimeException {
        private static final long serialVersionUID = 1L;

        BadRequest(String message) {
            super(message);
        }
    }

    private String handle(long id, String op, Map<String, Object> request) {
        switch (op) {
            case "attach":
                return attach(id, request.containsKey("path") ? request.get("path") : ABSENT);
            case "register":
                return register(id, request);
            case "register_agent":
                return registerAgent(id, request);
            case "checkpoint":
                if (!"sync".equals(request.get("mode"))) {
                    return error(id, "UNSUPPORTED", "the Java SDK has only the sync checkpoint");
                }
                return ok(id, "\"yielded\":" + needWorker().checkpoint()); // a lost worker: false, never an error
            case "checkpoint_loop": {
                long duration = integer(request, "duration_ms");
                Worker w = needWorker();
                long end = System.nanoTime() + duration * 1_000_000L;
                long iterations = 0;
                long yields = 0;
                while (System.nanoTime() < end) {
                    for (int i = 0; i < 64; i++) {
                        iterations++;
                        if (w.checkpoint()) {
                            yields++;
                        }
                    }
                }
                return ok(id, "\"iterations\":" + iterations + ",\"yields\":" + yields);
            }
            case "critical_enter": { // the thread's depth, worker or not (SCB.md §5.3)
                Morpheus.criticalEnter();
                return ok(id, "\"depth\":" + Morpheus.criticalDepth());
            }
            case "critical_exit": {
                Morpheus.criticalExit();
                return ok(id, "\"depth\":" + Morpheus.criticalDepth());
            }
            case "set_escapable": {
                Object value = request.get("value");
                if (!(value instanceof Boolean)) {
                    throw new BadRequest("value must be a boolean");
                }
                needWorker().setEscapable((Boolean) value);
                return ok(id, null);
            }
            case "set_priority":
                needWorker().setPriority(Math.toIntExact(integer(request, "value")));
                return ok(id, null);
            case "explicit_yield": // the application yielded on its own (SCB.md §5.8)
                needWorker().recordExplicitYield();
                return ok(id, null);
            case "mode_clock": { // the thread's mode clock (SCB.md §5.4): every op of this agent runs on it
                long ns = integer(request, "ns");
                if (ns < 0) {
                    throw new BadRequest("ns must be an integer >= 0");
                }
                Morpheus.setModeClockForTesting(ns);
                return ok(id, null);
            }
            case "status":
                return status(id, needWorker());
            case "state":
                return state(id);
            case "shutdown": {
                Worker w = needWorker();
                worker = null;
                w.close();
                return ok(id, null);
            }
            default:
                return error(id, "UNSUPPORTED", "unknown op " + op);
        }
    }

    private String attach(long id, Object path) {
        if (path != ABSENT && path != null && !(path instanceof String)) {
            throw new BadRequest("path must be a string");
        }
        String asked = path instanceof String ? (String) path : null;
        // A refused region throws here and changes nothing (CONFORMANCE.md §2.3): the earlier path stays.
        boolean ok = Morpheus.checkRegion(asked);
        attached = ok;
        regionPath = ok ? asked : ""; // null: register discovers the same region again; "": detached
        return ok(id, "\"attached\":" + ok);
    }

    private String register(long id, Map<String, Object> request) {
        long slot = integer(request, "slot");
        if (slot < 0 || slot > Integer.MAX_VALUE) {
            throw new BadRequest("slot must be a non-negative integer");
        }
        Options options = Options.defaults().directSlot((int) slot);
        if (regionPath == null) {
            // discovery, as attach did
        } else if (regionPath.isEmpty()) {
            options.detached();
        } else {
            options.regionPath(regionPath);
        }
        if (request.get("escapable") instanceof Boolean) {
            options.escapable((Boolean) request.get("escapable"));
        }
        if (request.get("priority") instanceof Long) {
            options.priority(Math.toIntExact((Long) request.get("priority")));
        }
        worker = Morpheus.register(options);
        String got = worker.slot().isPresent() ? Integer.toString(worker.slot().getAsInt()) : "null";
        return ok(id, "\"tid\":" + tid() + ",\"attached\":" + worker.slot().isPresent() + ",\"slot\":" + got);
    }

    /** Registration through the agent (SCB.md §4.1) by discovery (§1.2): the default options. */
    private String registerAgent(long id, Map<String, Object> request) {
        Options options = Options.defaults();
        if (request.get("escapable") instanceof Boolean) {
            options.escapable((Boolean) request.get("escapable"));
        }
        if (request.get("priority") instanceof Long) {
            options.priority(Math.toIntExact((Long) request.get("priority")));
        }
        worker = Morpheus.register(options);
        String got = worker.slot().isPresent() ? Integer.toString(worker.slot().getAsInt()) : "null";
        return ok(id, "\"tid\":" + tid() + ",\"attached\":" + worker.slot().isPresent() + ",\"slot\":" + got);
    }

    /** attached: true on a live region, false when detached (DETACHED); GENERATION_CHANGED is the error. */
    private static String status(long id, Worker w) {
        try {
            w.checkStatus();
            return ok(id, "\"attached\":true");
        } catch (MorpheusException e) {
            if (e.code() == ErrorCode.DETACHED) {
                return ok(id, "\"attached\":false");
            }
            throw e;
        }
    }

    private String state(long id) {
        if (worker == null) {
            return ok(id, "\"attached\":" + attached + ",\"registered\":false,\"depth\":" + Morpheus.criticalDepth());
        }
        String slot = worker.slot().isPresent() ? Integer.toString(worker.slot().getAsInt()) : "null";
        return ok(id, "\"attached\":" + worker.slot().isPresent() + ",\"registered\":true,\"depth\":"
                + worker.criticalDepth() + ",\"cached_ack\":" + Long.toUnsignedString(worker.cachedAck())
                + ",\"yields\":" + worker.yieldCount() + ",\"mode\":\"" + worker.runtimeMode().name()
                + "\",\"escapable\":" + worker.escapable() + ",\"priority\":" + worker.priority() + ",\"slot\":" + slot);
    }

    private Worker needWorker() {
        if (worker == null) {
            throw new AgentError(ErrorCode.NOT_REGISTERED, "no worker on this thread");
        }
        return worker;
    }

    private static final class AgentError extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final ErrorCode code;

        AgentError(ErrorCode code, String message) {
            super(message);
            this.code = code;
        }
    }

    /** The OS thread id (gettid) of the calling thread, from /proc/thread-self -> "PID/task/TID". */
    private static long tid() {
        try {
            Path link = Files.readSymbolicLink(Path.of("/proc/thread-self"));
            return Long.parseLong(link.getFileName().toString());
        } catch (IOException e) {
            throw new IllegalStateException("cannot read /proc/thread-self", e);
        }
    }

    private static long integer(Map<String, Object> request, String key) {
        Object value = request.get(key);
        if (!(value instanceof Long)) {
            throw new BadRequest(key + " must be an integer");
        }
        return (Long) value;
    }

    private static String ok(long id, String fields) {
        return "{\"id\":" + id + ",\"ok\":true" + (fields == null ? "" : "," + fields) + "}";
    }

    private static String error(long id, String name, String message) {
        return "{\"id\":" + id + ",\"ok\":false,\"error\":" + Json.quote(name) + ",\"message\":" + Json.quote(message)
                + "}";
    }

    /** Flat JSON objects of strings, integers, booleans and null: all a request holds (CONFORMANCE.md §2.3). */
    static final class Json {
        static Map<String, Object> parse(String text) {
            Map<String, Object> out = new HashMap<>();
            int[] at = {skip(text, 0)};
            expect(text, at, '{');
            if (peek(text, at) == '}') {
                return out;
            }
            while (true) {
                String key = string(text, at);
                expect(text, at, ':');
                out.put(key, value(text, at));
                char c = peek(text, at);
                at[0]++;
                if (c == '}') {
                    return out;
                }
                if (c != ',') {
                    throw new IllegalArgumentException("expected , or } at " + (at[0] - 1));
                }
            }
        }

        private static int skip(String s, int i) {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
                i++;
            }
            return i;
        }

        private static char peek(String s, int[] at) {
            at[0] = skip(s, at[0]);
            if (at[0] >= s.length()) {
                throw new IllegalArgumentException("unexpected end of request");
            }
            return s.charAt(at[0]);
        }

        private static void expect(String s, int[] at, char c) {
            if (peek(s, at) != c) {
                throw new IllegalArgumentException("expected " + c + " at " + at[0]);
            }
            at[0]++;
        }

        private static Object value(String s, int[] at) {
            char c = peek(s, at);
            if (c == '"') {
                return string(s, at);
            }
            for (String word : new String[] {"true", "false", "null"}) {
                if (s.startsWith(word, at[0])) {
                    at[0] += word.length();
                    return word.equals("null") ? null : Boolean.valueOf(word);
                }
            }
            int start = at[0];
            if (c == '-') {
                at[0]++;
            }
            while (at[0] < s.length() && Character.isDigit(s.charAt(at[0]))) {
                at[0]++;
            }
            try {
                return Long.parseLong(s.substring(start, at[0]));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("expected a string, integer, boolean or null at " + start);
            }
        }

        private static String string(String s, int[] at) {
            expect(s, at, '"');
            StringBuilder out = new StringBuilder();
            while (true) {
                if (at[0] >= s.length()) {
                    throw new IllegalArgumentException("unterminated string");
                }
                char c = s.charAt(at[0]++);
                if (c == '"') {
                    return out.toString();
                }
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                char e = s.charAt(at[0]++);
                switch (e) {
                    case 'n': out.append('\n'); break;
                    case 't': out.append('\t'); break;
                    case 'r': out.append('\r'); break;
                    case 'b': out.append('\b'); break;
                    case 'f': out.append('\f'); break;
                    case 'u': out.append((char) Integer.parseInt(s.substring(at[0], at[0] + 4), 16)); at[0] += 4; break;
                    default: out.append(e);
                }
            }
        }

        static String quote(String text) {
            StringBuilder out = new StringBuilder("\"");
            for (char c : (text == null ? "" : text).toCharArray()) {
                if (c == '"' || c == '\\') {
                    out.append('\\').append(c);
                } else if (c < 0x20) {
                    out.append(String.format("\\u%04x", (int) c));
                } else {
                    out.append(c);
                }
            }
            return out.append('"').toString();
        }
    }
}
