package eventtime.flink;

import org.apache.flink.api.common.eventtime.BoundedOutOfOrdernessWatermarks;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceOutput;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * A bounded FLIP-27 source that replays a trace in its arrival order, each record through the
 * split-local output of its partition, so that Flink runs one watermark generator per split and
 * combines them (the per-split watermarks a Kafka source gets).
 *
 * <p>Each line of the script is tab-separated: an action, a split id, then the nine fields of a
 * record (kind, case, batch, seq, key, ts, wm, value, extra), the event's timestamp in ts. Actions:
 * {@code open} creates the split's output (a new partition), {@code release} releases it (a removed
 * partition), {@code record} emits the record through the split's output, or through the reader's
 * main output when the split id is empty. The source does nothing to a record but emit it.
 *
 * <p>A source built to stay open ({@link #holdingOpen}) does not end after its script: it waits for
 * nothing forever, so the last watermark it emitted stays the watermark of its output (an ending
 * source would emit Flink's end-of-input watermark, Long.MAX_VALUE, after it) until the job is
 * cancelled.
 */
public final class TraceSource implements Source<Row, TraceSource.Whole, Integer> {
    private static final long serialVersionUID = 1L;

    private final String script;
    private final boolean holdOpen;

    public TraceSource(String script) {
        this(script, false);
    }

    private TraceSource(String script, boolean holdOpen) {
        this.script = script;
        this.holdOpen = holdOpen;
    }

    /** A source of {@code script} that stays open after it (see the class comment). */
    public static TraceSource holdingOpen(String script) {
        return new TraceSource(script, true);
    }

    /** Flink's documented custom-generator strategy with {@link PartitionWatermarks} per split. */
    public static WatermarkStrategy<Row> watermarkStrategy() {
        return WatermarkStrategy.forGenerator(context -> new PartitionWatermarks());
    }

    @Override
    public Boundedness getBoundedness() {
        return Boundedness.BOUNDED;
    }

    @Override
    public SourceReader<Row, Whole> createReader(SourceReaderContext context) {
        return new Reader(script, holdOpen);
    }

    @Override
    public SplitEnumerator<Whole, Integer> createEnumerator(SplitEnumeratorContext<Whole> context) {
        return new Enumerator(context, false);
    }

    @Override
    public SplitEnumerator<Whole, Integer> restoreEnumerator(
            SplitEnumeratorContext<Whole> context, Integer assigned) {
        return new Enumerator(context, assigned != 0);
    }

    @Override
    public SimpleVersionedSerializer<Whole> getSplitSerializer() {
        return new WholeSerializer();
    }

    @Override
    public SimpleVersionedSerializer<Integer> getEnumeratorCheckpointSerializer() {
        return new FlagSerializer();
    }

    /**
     * One partition's watermark generator: an event goes to Flink's own bounded-out-of-orderness
     * generator (its delay in the record's value), emitted at once; a watermark record emits its
     * watermark; idle and active records mark the split idle or active. Other records (the
     * adapter's batch marks) change nothing.
     */
    public static final class PartitionWatermarks implements WatermarkGenerator<Row> {
        private BoundedOutOfOrdernessWatermarks<Row> events;

        @Override
        public void onEvent(Row row, long timestamp, WatermarkOutput output) {
            String kind = (String) row.getField(0);
            switch (kind) {
                case "event":
                    if (events == null) {
                        events = new BoundedOutOfOrdernessWatermarks<>(
                                Duration.ofMillis((Long) row.getField(7)));
                    }
                    events.onEvent(row, timestamp, output);
                    events.onPeriodicEmit(output);
                    break;
                case "watermark":
                    output.emitWatermark(new Watermark((Long) row.getField(6)));
                    break;
                case "idle":
                    output.markIdle();
                    break;
                case "active":
                    output.markActive();
                    break;
                default:
                    break;
            }
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput output) {}
    }

    /**
     * An operator of a trace's graph, as a process function reads Flink's watermark: it counts the
     * rows of kind "end" reaching it (a source's last record, or the one row each upstream node
     * emits) and, at the last of its {@code inputs}, emits one JSON row with the watermark Flink has
     * at that operator then. Every upstream has emitted all it will by then, so that watermark is
     * the operator's after the sources' scripts, whatever order Flink's tasks ran in.
     */
    public static final class NodeWatermark extends ProcessFunction<Row, Row> {
        private static final long serialVersionUID = 1L;

        private final long run;
        private final long node;
        private final int inputs;
        private int arrived;

        public NodeWatermark(long run, long node, int inputs) {
            this.run = run;
            this.node = node;
            this.inputs = inputs;
        }

        @Override
        public void processElement(Row row, Context context, Collector<Row> out) {
            if (!"end".equals(row.getField(0)) || ++arrived < inputs) {
                return;
            }
            long watermark = context.timerService().currentWatermark();
            out.collect(Row.of("end", run, 0L, 0L, "", 0L, watermark, node, ""));
        }
    }

    /** The one split: the whole script, read by the one reader. */
    public static final class Whole implements SourceSplit {
        static final String ID = "script";

        @Override
        public String splitId() {
            return ID;
        }
    }

    private static final class Enumerator implements SplitEnumerator<Whole, Integer> {
        private final SplitEnumeratorContext<Whole> context;
        private boolean assigned;

        Enumerator(SplitEnumeratorContext<Whole> context, boolean assigned) {
            this.context = context;
            this.assigned = assigned;
        }

        @Override
        public void start() {}

        @Override
        public void handleSplitRequest(int subtask, String hostname) {}

        @Override
        public void addSplitsBack(List<Whole> splits, int subtask) {
            assigned = false;
        }

        @Override
        public void addReader(int subtask) {
            if (!assigned) {
                context.assignSplit(new Whole(), subtask);
                assigned = true;
            }
            context.signalNoMoreSplits(subtask);
        }

        @Override
        public Integer snapshotState(long checkpointId) {
            return assigned ? 1 : 0;
        }

        @Override
        public void close() {}
    }

    private static final class Reader implements SourceReader<Row, Whole> {
        private final String script;
        private final boolean holdOpen;
        private final CompletableFuture<Void> available = new CompletableFuture<>();
        private final CompletableFuture<Void> never = new CompletableFuture<>();
        private List<String[]> lines;
        private boolean noMoreSplits;
        private int next;

        Reader(String script, boolean holdOpen) {
            this.script = script;
            this.holdOpen = holdOpen;
        }

        @Override
        public void start() {}

        @Override
        public InputStatus pollNext(ReaderOutput<Row> output) {
            if (lines == null) {
                return noMoreSplits ? InputStatus.END_OF_INPUT : InputStatus.NOTHING_AVAILABLE;
            }
            if (next == 0) {
                // Flink opened an output for the script's own split when it was assigned; it carries
                // no record and would hold the combined watermark at its start
                output.releaseOutputForSplit(Whole.ID);
            }
            if (next < lines.size()) {
                apply(lines.get(next++), output);
            }
            if (next < lines.size()) {
                return InputStatus.MORE_AVAILABLE;
            }
            return holdOpen ? InputStatus.NOTHING_AVAILABLE : InputStatus.END_OF_INPUT;
        }

        private static void apply(String[] line, ReaderOutput<Row> output) {
            String action = line[0];
            String split = line[1];
            if (action.equals("open")) {
                output.createOutputForSplit(split);
                return;
            }
            if (action.equals("release")) {
                output.releaseOutputForSplit(split);
                return;
            }
            if (!action.equals("record")) {
                throw new IllegalArgumentException("unknown action " + action);
            }
            Row row = Row.of(
                    text(line[2]), number(line[3]), number(line[4]), number(line[5]),
                    text(line[6]), number(line[7]), number(line[8]), number(line[9]), text(line[10]));
            SourceOutput<Row> target = split.isEmpty() ? output : output.createOutputForSplit(split);
            if ("event".equals(row.getField(0))) {
                target.collect(row, (Long) row.getField(5));
            } else {
                target.collect(row);
            }
        }

        private static String text(String field) {
            return field;
        }

        private static Long number(String field) {
            return Long.valueOf(field);
        }

        @Override
        public List<Whole> snapshotState(long checkpointId) {
            return Collections.emptyList();
        }

        @Override
        public CompletableFuture<Void> isAvailable() {
            return holdOpen && lines != null && next >= lines.size() ? never : available;
        }

        @Override
        public void addSplits(List<Whole> splits) {
            List<String[]> parsed = new ArrayList<>();
            for (String line : script.split("\n")) {
                if (!line.isEmpty()) {
                    parsed.add(line.split("\t", -1));
                }
            }
            lines = parsed;
            available.complete(null);
        }

        @Override
        public void notifyNoMoreSplits() {
            noMoreSplits = true;
            available.complete(null);
        }

        @Override
        public void close() {}
    }

    private static final class WholeSerializer implements SimpleVersionedSerializer<Whole> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(Whole split) {
            return split.splitId().getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public Whole deserialize(int version, byte[] serialized) {
            return new Whole();
        }
    }

    private static final class FlagSerializer implements SimpleVersionedSerializer<Integer> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(Integer flag) {
            return new byte[] {(byte) (int) flag};
        }

        @Override
        public Integer deserialize(int version, byte[] serialized) {
            return (int) serialized[0];
        }
    }
}
