// Prints Apache Kafka's error table as the kafka-clients jar on the class path defines it:
// one "code<TAB>NAME<TAB>retriable" line per org.apache.kafka.common.protocol.Errors member.
// Run by scripts/specs/generate.py with Java's single-file source launcher (a JDK).
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.protocol.Errors;

public class ErrorTable {
    public static void main(String[] args) {
        for (Errors error : Errors.values()) {
            boolean retriable = error.exception() instanceof RetriableException;
            System.out.println(error.code() + "\t" + error.name() + "\t" + retriable);
        }
    }
}
