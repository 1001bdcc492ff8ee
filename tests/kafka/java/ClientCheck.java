// Apache Kafka's Java client against a broker, for tests/kafka (compiled there with javac).
//
//   produce BOOTSTRAP TOPIC COUNT
//       the default producer (idempotent, acks=all) sends COUNT keyed records, key-<i> and
//       value-<i>; prints "P <key> <partition> <offset>" per acknowledged record
//   consume BOOTSTRAP TOPIC GROUP STRATEGY MEMBERS EXPECTED TIMEOUT_MS
//       MEMBERS consumers in one group (STRATEGY: "default" or an assignor class name),
//       started one after another, poll and commit until EXPECTED distinct keys arrived and
//       every member owns a partition; prints "R <member> <key> <partition> <offset>" per
//       record, "ASSIGN|REVOKE|LOSE <member> <partitions>" per rebalance callback (LEAVE for
//       the revoke that close() makes), "FINAL <member> <partitions>" at the end, then
//       "COMMITTED <partition> <offset>" as the group's committed offsets
//   transactions BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT
//       a transactional producer commits COUNT records (kept-<i>), writes COUNT more
//       (dropped-<i>) and aborts them, commits COUNT more (also-<i>); then a read_committed
//       and a read_uncommitted consumer read the topic from the start to its end for their
//       isolation; prints "<isolation> <value>" per record read
// Output is tab-separated; the exit status is non-zero when anything failed.
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ClientCheck {
    private static final ConcurrentLinkedQueue<String> OUT = new ConcurrentLinkedQueue<>();

    /** Client settings from the file $CLIENT_CHECK_CONFIG names (a secured cluster's
     *  security.protocol, sasl.*, ssl.*), or none. */
    static Properties settings() throws java.io.IOException {
        Properties props = new Properties();
        String path = System.getenv("CLIENT_CHECK_CONFIG");
        if (path != null && !path.isEmpty()) {
            try (java.io.FileReader reader = new java.io.FileReader(path)) {
                props.load(reader);
            }
        }
        return props;
    }

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]));
            case "consume" -> consume(args[1], args[2], args[3], args[4],
                    Integer.parseInt(args[5]), Integer.parseInt(args[6]), Long.parseLong(args[7]));
            case "transactions" -> transactions(args[1], args[2], args[3],
                    Integer.parseInt(args[4]));
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }

    static void produce(String bootstrap, String topic, int count) throws Exception {
        Properties props = settings();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "key-" + i, "value-" + i)));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata meta = sent.get(i).get();
                System.out.println("P\tkey-" + i + "\t" + meta.partition() + "\t" + meta.offset());
            }
        }
    }

    static void transactions(String bootstrap, String topic, String tid, int count)
            throws Exception {
        Properties props = settings();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            String[][] steps = {{"kept", "commit"}, {"dropped", "abort"}, {"also", "commit"}};
            for (String[] step : steps) {
                producer.beginTransaction();
                for (int i = 0; i < count; i++) {
                    producer.send(new ProducerRecord<>(topic, "k" + i, step[0] + "-" + i));
                }
                producer.flush();  // in the log before the abort: it has something to abort
                if (step[1].equals("commit")) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
            }
        }
        for (String isolation : new String[] {"read_committed", "read_uncommitted"}) {
            Properties c = settings();
            c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
            c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                    StringDeserializer.class.getName());
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                List<TopicPartition> partitions = consumer.partitionsFor(topic).stream()
                        .map(p -> new TopicPartition(topic, p.partition())).toList();
                consumer.assign(partitions);
                consumer.seekToBeginning(partitions);
                Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
                long deadline = System.currentTimeMillis() + 30_000;
                while (System.currentTimeMillis() < deadline
                        && partitions.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                        System.out.println(isolation + "\t" + r.value());
                    }
                }
                if (partitions.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                    System.err.println(isolation + ": did not reach the end " + ends);
                    System.exit(1);
                }
            }
        }
    }

    static String names(Collection<TopicPartition> partitions) {
        return partitions.stream().map(TopicPartition::partition).sorted()
                .map(String::valueOf).collect(Collectors.joining(","));
    }

    static void consume(String bootstrap, String topic, String group, String strategy,
                        int members, int expected, long timeoutMs) throws Exception {
        Map<String, Boolean> keys = new ConcurrentHashMap<>();
        List<Set<TopicPartition>> owned = new ArrayList<>();
        AtomicBoolean done = new AtomicBoolean();
        AtomicBoolean failed = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        for (int m = 0; m < members; m++) {
            owned.add(ConcurrentHashMap.newKeySet());
        }
        for (int m = 0; m < members; m++) {
            final int member = m;
            Properties props = settings();
            props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            props.put(ConsumerConfig.CLIENT_ID_CONFIG, "member-" + member);
            props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            if (!strategy.equals("default")) {
                props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, strategy);
            }
            Thread thread = new Thread(() -> {
                Set<TopicPartition> mine = owned.get(member);
                AtomicBoolean closing = new AtomicBoolean();
                try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
                    consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                        @Override
                        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                            // leaving the group at close() revokes too: told apart
                            String kind = closing.get() ? "LEAVE" : "REVOKE";
                            OUT.add(kind + "\t" + member + "\t" + names(partitions));
                            mine.removeAll(partitions);
                            if (!partitions.isEmpty()) {
                                commit(consumer);
                            }
                        }

                        @Override
                        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                            OUT.add("ASSIGN\t" + member + "\t" + names(partitions));
                            mine.addAll(partitions);
                        }

                        @Override
                        public void onPartitionsLost(Collection<TopicPartition> partitions) {
                            OUT.add("LOSE\t" + member + "\t" + names(partitions));
                            mine.removeAll(partitions);
                        }
                    });
                    while (!done.get() && System.currentTimeMillis() < deadline) {
                        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                            OUT.add("R\t" + member + "\t" + r.key() + "\t" + r.partition() + "\t" + r.offset());
                            keys.put(r.key(), Boolean.TRUE);
                        }
                        commit(consumer);
                    }
                    OUT.add("FINAL\t" + member + "\t" + names(consumer.assignment()));
                    closing.set(true);
                } catch (RuntimeException e) {
                    failed.set(true);
                    OUT.add("ERROR\t" + member + "\t" + e);
                }
            }, "member-" + member);
            threads.add(thread);
            thread.start();
            // the next member joins a group that is already consuming: a real rebalance
            while (mine(owned, member).isEmpty() && System.currentTimeMillis() < deadline) {
                Thread.sleep(20);
            }
        }
        while (System.currentTimeMillis() < deadline) {
            boolean allOwn = owned.stream().noneMatch(Set::isEmpty);
            if (keys.size() >= expected && allOwn) {
                break;
            }
            Thread.sleep(20);
        }
        done.set(true);
        for (Thread thread : threads) {
            thread.join(30_000);
        }
        OUT.forEach(System.out::println);
        Properties props = settings();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> reader = new KafkaConsumer<>(props)) {
            Set<TopicPartition> all = reader.partitionsFor(topic).stream()
                    .map(p -> new TopicPartition(topic, p.partition()))
                    .collect(Collectors.toCollection(() -> new TreeSet<>(
                            (a, b) -> Integer.compare(a.partition(), b.partition()))));
            Map<TopicPartition, OffsetAndMetadata> committed = reader.committed(all);
            for (TopicPartition tp : all) {
                OffsetAndMetadata c = committed.get(tp);
                System.out.println("COMMITTED\t" + tp.partition() + "\t" + (c == null ? -1 : c.offset()));
            }
        }
        if (failed.get() || keys.size() < expected) {
            System.err.println("consumed " + keys.size() + " of " + expected + " keys");
            System.exit(1);
        }
    }

    // A commit refused because a rebalance began is retried after the next poll, as the
    // client's own message advises; the records stay owned by whoever commits them next.
    static void commit(KafkaConsumer<String, String> consumer) {
        try {
            consumer.commitSync();
        } catch (RebalanceInProgressException | CommitFailedException e) {
            OUT.add("RETRY\t" + e.getClass().getSimpleName());
        }
    }

    static Set<TopicPartition> mine(List<Set<TopicPartition>> owned, int member) {
        return Collections.unmodifiableSet(owned.get(member));
    }
}
