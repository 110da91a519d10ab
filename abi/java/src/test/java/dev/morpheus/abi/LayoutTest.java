// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus.abi;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemoryLayout.PathElement;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.tomlj.Toml;
import org.tomlj.TomlArray;
import org.tomlj.TomlParseResult;
import org.tomlj.TomlTable;

/** The generated Java ABI against spec/abi.toml, read afresh: FFM computes the layouts' offsets. */
class LayoutTest {
    private static TomlParseResult spec;

    @BeforeAll
    static void readSpec() throws Exception {
        spec = Toml.parse(Path.of(System.getProperty("morpheus.spec", "../../spec/abi.toml")));
        assertTrue(spec.errors().isEmpty(), () -> "spec/abi.toml: " + spec.errors());
    }

    static String camel(String snake) {
        StringBuilder out = new StringBuilder();
        for (String part : snake.split("_")) {
            out.append(Character.toUpperCase(part.charAt(0))).append(part.substring(1));
        }
        return out.toString();
    }

    static Stream<TomlTable> records() throws Exception {
        readSpec();
        TomlArray records = spec.getArray("record");
        List<TomlTable> out = new ArrayList<>();
        for (int i = 0; i < records.size(); i++) {
            out.add(records.getTable(i));
        }
        return out.stream();
    }

    @Test
    void version() {
        assertEquals(spec.getLong("abi.major"), Abi.ABI_MAJOR);
        assertEquals(spec.getLong("abi.minor"), Abi.ABI_MINOR);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("records")
    void recordLayoutsAndOffsetsMatchTheSpec(TomlTable record) throws Exception {
        String name = camel(record.getString("name"));
        StructLayout layout = (StructLayout) Class.forName("dev.morpheus.abi." + name + "Layout").getField("LAYOUT").get(null);
        Class<?> offsets = Class.forName("dev.morpheus.abi." + name + "Offsets");
        assertEquals(record.getLong("size"), layout.byteSize(), name + " size");
        assertEquals(record.getLong("align"), layout.byteAlignment(), name + " alignment");
        assertEquals(record.getLong("size"), offsets.getField("SIZE").getLong(null));
        TomlArray fields = record.getArray("fields");
        assertEquals(fields.size(), layout.memberLayouts().size(), name + " field count");
        for (int i = 0; i < fields.size(); i++) {
            TomlTable f = fields.getTable(i);
            String field = f.getString("name");
            long offset = f.getLong("offset");
            assertEquals(offset, layout.byteOffset(PathElement.groupElement(field)), name + "." + field + " (FFM)");
            assertEquals(f.getLong("size"), layout.select(PathElement.groupElement(field)).byteSize(), name + "." + field);
            assertEquals(offset, offsets.getField(field.toUpperCase()).getLong(null), name + "." + field + " (offsets)");
        }
    }

    @Test
    void enumsMatchTheSpec() throws Exception {
        TomlArray enums = spec.getArray("enum");
        for (int i = 0; i < enums.size(); i++) {
            TomlTable e = enums.getTable(i);
            Class<?> cls = Class.forName("dev.morpheus.abi." + camel(e.getString("name")));
            TomlArray values = e.getArray("values");
            if (!cls.isEnum()) {
                for (int j = 0; j < values.size(); j++) {
                    TomlTable v = values.getTable(j);
                    assertEquals(v.getLong("value"), cls.getField(v.getString("name")).getLong(null), cls.getName());
                }
                continue;
            }
            Object[] constants = cls.getEnumConstants();
            assertEquals(values.size(), constants.length, cls.getName() + " value count");
            for (int j = 0; j < values.size(); j++) {
                TomlTable v = values.getTable(j);
                Object constant = cls.getMethod("of", int.class).invoke(null, (int) (long) v.getLong("value"));
                assertEquals(v.getString("name"), ((Enum<?>) constant).name());
            }
        }
    }

    @Test
    void constantsAndEscapableDefaultsMatchTheSpec() throws Exception {
        TomlArray constants = spec.getArray("constant");
        for (int i = 0; i < constants.size(); i++) {
            TomlTable c = constants.getTable(i);
            Object got = Abi.class.getField(c.getString("name")).get(null);
            Object want = c.get("value");
            if (got instanceof Integer n) {
                got = (long) n;
            }
            assertEquals(want, got, c.getString("name"));
        }
        TomlTable defaults = spec.getTable("escapable_default");
        for (String lang : defaults.keySet()) {
            assertEquals(defaults.getBoolean(lang), Abi.escapableDefault(RuntimeKind.valueOf(lang)), lang);
        }
    }

    @Test
    void varHandlesReadAndWriteTheSpecOffsets() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment scb = arena.allocate(ScbLayout.LAYOUT);
            ScbLayout.LAST_ACK_SEQ.set(scb, 0L, 0x0102030405060708L);
            assertEquals(8, scb.get(ValueLayout.JAVA_BYTE, ScbOffsets.LAST_ACK_SEQ));
            ScbLayout.IN_CRITICAL.setRelease(scb, 0L, 1);
            assertEquals(1, scb.get(ValueLayout.JAVA_INT, ScbOffsets.IN_CRITICAL));
            assertEquals(1, (int) ScbLayout.IN_CRITICAL.getAcquire(scb, 0L));
        }
    }
}
