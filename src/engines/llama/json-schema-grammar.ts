/**
 * JSON Schemas as node-llama-cpp grammars, for structured output (`response_format`, `text.format`)
 * and strict tools: the model can only write text that parses and validates.
 *
 * `enforceableSchema` translates a client's JSON Schema into node-llama-cpp's `GbnfJsonSchema`, the
 * subset its grammar builder enforces: `type` (one or several), `enum`, `const`, `anyOf`, objects
 * (`properties`, `required`, `additionalProperties`, `minProperties`/`maxProperties`), arrays
 * (`items`, `prefixItems`, `minItems`/`maxItems`), strings (`minLength`/`maxLength`, `format`
 * `date-time`/`date`/`time`), `$defs`/`definitions` with local `$ref`s (recursion included), and a
 * one-element `allOf`. Annotations (`title`, `description`, `default`, `examples`, …) and keywords
 * that only widen what is valid (`nullable`) are dropped: leaving them out never lets an invalid
 * value through. A keyword that constrains values in a way the grammar cannot (`pattern`, `minimum`,
 * `multipleOf`, `oneOf`, `not`, `uniqueItems`, …) is refused with a 400 `invalid_json_schema` naming
 * it, as OpenAI refuses what strict mode does not support: the output is guaranteed, or the request
 * is refused, never half-enforced.
 *
 * The grammar is stricter than the schema where it must pick: every declared property is written
 * (node-llama-cpp always writes them all, which any `required` list accepts) and an object with
 * declared properties gets no others.
 *
 * Bounds on numbers (`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`; integer bounds
 * for numbers with a fraction) are enforced in structured output with digit patterns
 * (`number-range.ts`), and `format: uuid` with a pattern of its own; node-llama-cpp's schema has no
 * place for them, so they travel through it as markers. On tool arguments they are refused, except
 * integer bounds every written integer satisfies (zod's `.int()`).
 *
 * `patchNumberGrammar` fixes the ways node-llama-cpp's number rules let invalid values through: an
 * `integer` with a negative exponent (`1e-5` is no integer), integers past 2^53 (a JSON parser
 * rounds them) and exponents of up to 16 digits (`1e999` overflows every JSON parser to infinity).
 * It rewrites the rules in every grammar the `Llama` instance builds, function-call parameters
 * included, and puts in the markers' rules.
 */
import type { GbnfJsonSchema, Llama, LlamaGrammar } from "node-llama-cpp";
import { shown, SparkError } from "../../protocol/errors.js";
import { integerRange, MAX_MAGNITUDE, numberRange, toGbnf, type Bound } from "./number-range.js";

type Json = Record<string, unknown>;

/** Annotations and widening keywords: dropping them never admits an invalid value. */
const DROPPED = new Set([
  "title",
  "description",
  "default",
  "examples",
  "example",
  "$comment",
  "$schema",
  "$id",
  "$anchor",
  "deprecated",
  "readOnly",
  "writeOnly",
  "contentMediaType",
  "contentEncoding",
  "contentSchema",
  "nullable",
  "discriminator",
  "strict",
]);

/** Constraining keywords the grammar cannot enforce, with what to do instead. */
const UNENFORCEABLE: Record<string, string> = {
  pattern: "describe the format in 'description' instead",
  patternProperties: "declare the properties by name",
  propertyNames: "declare the properties by name",
  multipleOf: "describe it in 'description' instead",
  oneOf: "use 'anyOf' (alternatives that may overlap)",
  not: "list what is allowed instead",
  if: "use 'anyOf'",
  then: "use 'anyOf'",
  else: "use 'anyOf'",
  dependentRequired: "make the properties required",
  dependentSchemas: "use 'anyOf'",
  dependencies: "make the properties required",
  contains: "use 'items'",
  minContains: "use 'items'",
  maxContains: "use 'items'",
  $dynamicRef: "use a local '$ref' to '#/$defs/NAME'",
  $dynamicAnchor: "use a local '$ref' to '#/$defs/NAME'",
  $recursiveRef: "use a local '$ref' to '#/$defs/NAME'",
  $recursiveAnchor: "use a local '$ref' to '#/$defs/NAME'",
};

const STRING_FORMATS = new Set(["date-time", "date", "time"]);
/**
 * A constraint node-llama-cpp cannot express, written into the schema as a `const` string and
 * replaced in the built grammar by its rule (`patchedGrammar`): `i_LO_HI` integers LO…HI, `n_L_H`
 * numbers between bounds (`u` none, `x` exclusive, `i` inclusive), `uuid` a UUID string. Negative
 * numbers are written with `m` (`m5` is −5).
 */
const MARKER = "spark_marker_";
const SCALAR_TYPES = new Set(["string", "number", "integer", "boolean", "null"]);
const MAX_DEPTH = 64;
const MAX_NODES = 20_000;
const ROOT_DEF = "spark_root";

/** Any JSON value, as node-llama-cpp can describe it. */
const ANY_VALUE: GbnfJsonSchema = {
  oneOf: [
    { type: ["string", "number", "boolean", "null"] },
    { type: "object", additionalProperties: true },
    { type: "array" },
  ],
};

function isRecord(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The 400 for a schema that cannot be enforced, naming where in it (`param`) and why. */
export function invalidSchema(param: string, message: string): SparkError {
  return SparkError.invalid(
    `Invalid JSON schema at '${shown(param, 200)}': ${message}`,
    param,
    "invalid_json_schema",
  );
}

/**
 * The client's schema (sent at `param`) as a `GbnfJsonSchema` node-llama-cpp enforces exactly, or a
 * 400 `invalid_json_schema` naming the first keyword it cannot enforce.
 */
export function enforceableSchema(
  schema: unknown,
  param: string,
  use: "response" | "tool" = "response",
): GbnfJsonSchema {
  return new SchemaTranslator(param, use).root(schema);
}

class SchemaTranslator {
  readonly #defs: Record<string, GbnfJsonSchema> = {};
  /** Definitions by name, with where they came from, translated on first reference. */
  readonly #sources = new Map<string, { schema: unknown; param: string }>();
  #nodes = 0;
  #rootReferenced = false;

  constructor(
    private readonly param: string,
    /**
     * `response`: the grammar is built here (`GrammarCache`), so constraints node-llama-cpp cannot
     * express go in as markers (`MARKER`) that `patchedGrammar` replaces. `tool`: node-llama-cpp
     * builds the grammar and validates the arguments against the schema, so markers cannot be used.
     */
    private readonly use: "response" | "tool",
  ) {}

  root(schema: unknown): GbnfJsonSchema {
    if (!isRecord(schema)) throw invalidSchema(this.param, "a schema must be a JSON object.");
    this.#collectDefs(schema, this.param);
    const translated = this.#translate(schema, this.param, 0);
    if (this.#rootReferenced) this.#defs[ROOT_DEF] = translated;
    const defs = Object.keys(this.#defs).length > 0 ? { $defs: this.#defs } : {};
    if (this.#rootReferenced) return { $ref: `#/$defs/${ROOT_DEF}`, ...defs } as GbnfJsonSchema;
    return { ...(translated as object), ...defs } as GbnfJsonSchema;
  }

  /** `$defs` and `definitions` of the root (and of nested schemas, hoisted: names must not clash). */
  #collectDefs(schema: Json, param: string): void {
    for (const key of ["$defs", "definitions"]) {
      const defs = schema[key];
      if (defs === undefined) continue;
      if (!isRecord(defs)) throw invalidSchema(`${param}.${key}`, `'${key}' must be an object of schemas.`);
      for (const [name, definition] of Object.entries(defs)) {
        if (this.#sources.has(name) || name === ROOT_DEF)
          throw invalidSchema(
            `${param}.${key}.${name}`,
            `the definition name '${shown(name)}' is used twice.`,
          );
        this.#sources.set(name, { schema: definition, param: `${param}.${key}.${name}` });
        if (isRecord(definition)) this.#collectDefs(definition, `${param}.${key}.${name}`);
      }
    }
  }

  #reference(ref: unknown, param: string): GbnfJsonSchema {
    if (ref === "#") {
      this.#rootReferenced = true;
      return { $ref: `#/$defs/${ROOT_DEF}` } as GbnfJsonSchema;
    }
    const match = typeof ref === "string" ? /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(ref) : null;
    const name = match?.[1]?.replace(/~1/g, "/").replace(/~0/g, "~");
    const source = name === undefined ? undefined : this.#sources.get(name);
    if (name === undefined || source === undefined)
      throw invalidSchema(
        `${param}.$ref`,
        `'$ref' ${shown(ref)} does not name a definition of this schema: use '#/$defs/NAME' (or '#' for the root).`,
      );
    if (!(name in this.#defs)) {
      // Placeholder first, so a recursive definition refers to itself instead of looping.
      this.#defs[name] = ANY_VALUE;
      this.#defs[name] = this.#translate(source.schema, source.param, 0);
    }
    return { $ref: `#/$defs/${name}` } as GbnfJsonSchema;
  }

  #translate(schema: unknown, param: string, depth: number): GbnfJsonSchema {
    if (++this.#nodes > MAX_NODES)
      throw invalidSchema(param, `the schema has more than ${MAX_NODES} subschemas.`);
    if (depth > MAX_DEPTH) throw invalidSchema(param, `the schema nests deeper than ${MAX_DEPTH} levels.`);
    if (schema === true) return ANY_VALUE;
    if (schema === false) throw invalidSchema(param, "the schema 'false' admits no value.");
    if (!isRecord(schema)) throw invalidSchema(param, "a schema must be a JSON object (or true).");

    const keys = Object.keys(schema).filter((key) => !DROPPED.has(key) && !key.startsWith("x-"));
    for (const key of keys) {
      const advice = UNENFORCEABLE[key];
      if (advice !== undefined)
        throw invalidSchema(
          `${param}.${key}`,
          `'${key}' cannot be enforced while decoding (Spark constrains output with a grammar); ${advice}.`,
        );
    }
    const description = typeof schema.description === "string" ? { description: schema.description } : {};
    if (schema.$ref !== undefined) {
      const siblings = keys.filter((key) => !["$ref", "$defs", "definitions"].includes(key));
      if (siblings.length > 0)
        throw invalidSchema(`${param}.${siblings[0]}`, `'${siblings[0]}' beside '$ref' cannot be enforced.`);
      return { ...this.#reference(schema.$ref, param), ...description } as GbnfJsonSchema;
    }
    if (Array.isArray(schema.allOf)) {
      if (schema.allOf.length !== 1)
        throw invalidSchema(
          `${param}.allOf`,
          "'allOf' with more than one schema cannot be enforced; merge them.",
        );
      const rest = Object.fromEntries(Object.entries(schema).filter(([key]) => key !== "allOf"));
      const only = schema.allOf[0];
      if (!isRecord(only)) throw invalidSchema(`${param}.allOf[0]`, "a schema must be a JSON object.");
      const merged: Json = { ...only, ...rest };
      for (const key of Object.keys(only))
        if (key in rest && !DROPPED.has(key) && key !== "$defs")
          throw invalidSchema(
            `${param}.allOf[0].${key}`,
            `'${key}' both inside and beside 'allOf' cannot be enforced.`,
          );
      return this.#translate(merged, param, depth + 1);
    }
    if (schema.anyOf !== undefined) {
      if (!Array.isArray(schema.anyOf) || schema.anyOf.length === 0)
        throw invalidSchema(`${param}.anyOf`, "'anyOf' must be a non-empty array of schemas.");
      const siblings = keys.filter((key) => !["anyOf", "$defs", "definitions"].includes(key));
      if (siblings.length > 0)
        throw invalidSchema(
          `${param}.${siblings[0]}`,
          `'${siblings[0]}' beside 'anyOf' cannot be enforced; move it into each alternative.`,
        );
      return {
        oneOf: schema.anyOf.map((alternative, index) =>
          this.#translate(alternative, `${param}.anyOf[${index}]`, depth + 1),
        ),
        ...description,
      } as GbnfJsonSchema;
    }
    if (schema.const !== undefined)
      return { const: this.#literal(schema.const, `${param}.const`), ...description };
    if (schema.enum !== undefined) {
      if (!Array.isArray(schema.enum) || schema.enum.length === 0)
        throw invalidSchema(`${param}.enum`, "'enum' must be a non-empty array.");
      const values = schema.enum.map((value, index) => this.#literal(value, `${param}.enum[${index}]`));
      const typed = values.filter((value) => matchesType(value, schema.type));
      if (typed.length === 0)
        throw invalidSchema(`${param}.enum`, "no value of 'enum' has the schema's 'type'.");
      return { enum: typed, ...description };
    }

    const type = schema.type ?? inferredType(schema);
    if (Array.isArray(type)) {
      if (type.length === 0) throw invalidSchema(`${param}.type`, "'type' must name at least one type.");
      return {
        oneOf: type.map((single) => this.#translate({ ...schema, type: single }, param, depth + 1)),
        ...description,
      } as GbnfJsonSchema;
    }
    if (type === undefined) return { ...ANY_VALUE, ...description } as GbnfJsonSchema;
    switch (type) {
      case "object":
        return this.#object(schema, param, depth, description);
      case "array":
        return this.#array(schema, param, depth, description);
      case "string": {
        if (schema.format !== undefined) {
          if (schema.format === "uuid" && this.use === "response")
            return { const: `${MARKER}uuid`, ...description };
          if (typeof schema.format !== "string" || !STRING_FORMATS.has(schema.format))
            throw invalidSchema(
              `${param}.format`,
              `format ${shown(schema.format)} cannot be enforced while decoding; the supported formats are date-time, date, time${this.use === "response" ? " and uuid" : ""}.`,
            );
          return { type: "string", format: schema.format as "date-time", ...description };
        }
        return {
          type: "string",
          ...count(schema, "minLength", param),
          ...count(schema, "maxLength", param),
          ...description,
        } as GbnfJsonSchema;
      }
      case "integer":
      case "number":
        return this.#number(schema, type as "integer" | "number", param, description);
      default:
        if (typeof type !== "string" || !SCALAR_TYPES.has(type))
          throw invalidSchema(`${param}.type`, `unknown type ${shown(type)}.`);
        return { type: type as "boolean", ...description };
    }
  }

  /** A number or integer, with its bounds as a range marker (or a 400 where they cannot be). */
  #number(schema: Json, type: "integer" | "number", param: string, description: object): GbnfJsonSchema {
    const bound = (key: string): number | undefined => {
      const value = schema[key];
      if (value === undefined) return undefined;
      if (typeof value !== "number" || !Number.isFinite(value))
        throw invalidSchema(`${param}.${key}`, `'${key}' must be a number.`);
      return value;
    };
    const minimum = bound("minimum");
    const exclusiveMinimum = bound("exclusiveMinimum");
    const maximum = bound("maximum");
    const exclusiveMaximum = bound("exclusiveMaximum");
    if ([minimum, exclusiveMinimum, maximum, exclusiveMaximum].every((value) => value === undefined))
      return { type, ...description };
    // The tighter of each pair of bounds.
    const lower =
      exclusiveMinimum !== undefined && (minimum === undefined || exclusiveMinimum >= minimum)
        ? { value: exclusiveMinimum, exclusive: true, key: "exclusiveMinimum" }
        : minimum !== undefined
          ? { value: minimum, exclusive: false, key: "minimum" }
          : undefined;
    const upper =
      exclusiveMaximum !== undefined && (maximum === undefined || exclusiveMaximum <= maximum)
        ? { value: exclusiveMaximum, exclusive: true, key: "exclusiveMaximum" }
        : maximum !== undefined
          ? { value: maximum, exclusive: false, key: "maximum" }
          : undefined;
    if (type === "integer") {
      const lo =
        lower === undefined
          ? -MAX_MAGNITUDE
          : lower.exclusive
            ? Math.floor(lower.value) + 1
            : Math.ceil(lower.value);
      const hi =
        upper === undefined
          ? MAX_MAGNITUDE
          : upper.exclusive
            ? Math.ceil(upper.value) - 1
            : Math.floor(upper.value);
      // Spark writes integers of at most 15 digits: bounds beyond that hold for every one (zod's
      // `.int()` bounds every integer to ±(2^53 − 1)).
      if (lo <= -MAX_MAGNITUDE && hi >= MAX_MAGNITUDE) return { type, ...description };
      if (lo > hi) throw invalidSchema(`${param}.${lower!.key}`, "no integer lies within the bounds.");
      this.#requireMarkers(param, lower ?? upper!);
      return { const: `${MARKER}i_${encode(lo)}_${encode(hi)}`, ...description };
    }
    for (const limit of [lower, upper])
      if (limit && !Number.isInteger(limit.value))
        throw invalidSchema(
          `${param}.${limit.key}`,
          `a bound with a fraction cannot be enforced while decoding; use an integer bound or type 'integer'.`,
        );
    if (numberRange(lower, upper) === undefined)
      throw invalidSchema(`${param}.${(lower ?? upper)!.key}`, "no number lies within the bounds.");
    this.#requireMarkers(param, lower ?? upper!);
    const side = (limit: { value: number; exclusive: boolean } | undefined): string =>
      limit === undefined ? "u" : `${encode(limit.value)}${limit.exclusive ? "x" : "i"}`;
    return { const: `${MARKER}n_${side(lower)}_${side(upper)}`, ...description };
  }

  #requireMarkers(param: string, limit: { key: string }): void {
    if (this.use === "response") return;
    throw invalidSchema(
      `${param}.${limit.key}`,
      `'${limit.key}' cannot be enforced on tool arguments (only on structured output); describe the range in 'description' instead.`,
    );
  }

  #object(schema: Json, param: string, depth: number, description: object): GbnfJsonSchema {
    const declared = schema.properties;
    if (declared !== undefined && !isRecord(declared))
      throw invalidSchema(`${param}.properties`, "'properties' must be an object of schemas.");
    const properties: Record<string, GbnfJsonSchema> = {};
    for (const [name, property] of Object.entries(declared ?? {}))
      properties[name] = this.#translate(property, `${param}.properties.${name}`, depth + 1);
    const names = Object.keys(properties);
    if (schema.required !== undefined) {
      if (!Array.isArray(schema.required))
        throw invalidSchema(`${param}.required`, "'required' must be an array of property names.");
      const missing = schema.required.find((name) => typeof name !== "string" || !(name in properties));
      if (missing !== undefined && names.length > 0)
        throw invalidSchema(
          `${param}.required`,
          `'required' names ${shown(missing)}, which is not among the declared properties.`,
        );
    }
    if (schema.unevaluatedProperties !== undefined && schema.unevaluatedProperties !== false)
      throw invalidSchema(
        `${param}.unevaluatedProperties`,
        "'unevaluatedProperties' cannot be enforced; use 'additionalProperties'.",
      );
    const out: Json = { type: "object", properties, ...description };
    if (names.length === 0) {
      const additional = schema.additionalProperties;
      out.additionalProperties =
        additional === false
          ? false
          : additional === undefined || additional === true
            ? true
            : this.#translate(additional, `${param}.additionalProperties`, depth + 1);
      Object.assign(out, count(schema, "minProperties", param), count(schema, "maxProperties", param));
    } else {
      // Every declared property is written, and nothing else.
      const min = schema.minProperties;
      const max = schema.maxProperties;
      if (typeof min === "number" && min > names.length)
        throw invalidSchema(
          `${param}.minProperties`,
          "'minProperties' above the declared properties cannot be enforced.",
        );
      if (typeof max === "number" && max < names.length)
        throw invalidSchema(
          `${param}.maxProperties`,
          "'maxProperties' below the declared properties cannot be enforced (all of them are written).",
        );
    }
    return out as GbnfJsonSchema;
  }

  #array(schema: Json, param: string, depth: number, description: object): GbnfJsonSchema {
    if (schema.uniqueItems !== undefined && schema.uniqueItems !== false)
      throw invalidSchema(`${param}.uniqueItems`, "'uniqueItems' cannot be enforced while decoding.");
    if (schema.unevaluatedItems !== undefined && schema.unevaluatedItems !== false)
      throw invalidSchema(`${param}.unevaluatedItems`, "'unevaluatedItems' cannot be enforced; use 'items'.");
    const out: Json = { type: "array", ...description };
    let maxItems = count(schema, "maxItems", param).maxItems;
    if (Array.isArray(schema.prefixItems)) {
      out.prefixItems = schema.prefixItems.map((item, index) =>
        this.#translate(item, `${param}.prefixItems[${index}]`, depth + 1),
      );
      if (schema.items === false) maxItems = Math.min(maxItems ?? Infinity, schema.prefixItems.length);
    } else if (schema.prefixItems !== undefined) {
      throw invalidSchema(`${param}.prefixItems`, "'prefixItems' must be an array of schemas.");
    }
    if (schema.items !== undefined && schema.items !== false) {
      if (Array.isArray(schema.items))
        throw invalidSchema(
          `${param}.items`,
          "an array of schemas in 'items' is 'prefixItems' since JSON Schema 2020-12.",
        );
      out.items = this.#translate(schema.items, `${param}.items`, depth + 1);
    } else if (schema.items === false && out.prefixItems === undefined) {
      maxItems = 0;
    }
    Object.assign(out, count(schema, "minItems", param));
    if (maxItems !== undefined) out.maxItems = maxItems;
    return out as GbnfJsonSchema;
  }

  #literal(value: unknown, param: string): string | number | boolean | null {
    if (value === null || ["string", "number", "boolean"].includes(typeof value))
      return value as string | number | boolean | null;
    throw invalidSchema(param, "an object or array as an 'enum' or 'const' value cannot be enforced.");
  }
}

function inferredType(schema: Json): string | undefined {
  if (schema.properties !== undefined || schema.additionalProperties !== undefined) return "object";
  if (schema.items !== undefined || schema.prefixItems !== undefined) return "array";
  return undefined;
}

function count(schema: Json, key: string, param: string): Record<string, number> {
  const value = schema[key];
  if (value === undefined) return {};
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0)
    throw invalidSchema(`${param}.${key}`, `'${key}' must be a non-negative integer.`);
  return { [key]: value };
}

function matchesType(value: unknown, type: unknown): boolean {
  if (type === undefined) return true;
  const types = Array.isArray(type) ? type : [type];
  return types.some((single) => {
    if (single === "null") return value === null;
    if (single === "integer") return typeof value === "number" && Number.isInteger(value);
    return typeof value === single;
  });
}

/** `json_object` mode: any JSON object. */
export const ANY_OBJECT: GbnfJsonSchema = { type: "object", additionalProperties: true };

/**
 * Grammars for schemas, built once per distinct schema (a client sends the same schema with every
 * request). Bounded: the least recently used grammar goes past `capacity`.
 */
export class GrammarCache {
  readonly #grammars = new Map<string, Promise<LlamaGrammar>>();

  constructor(
    private readonly llama: Llama,
    private readonly capacity = 64,
  ) {}

  get(schema: GbnfJsonSchema): Promise<LlamaGrammar> {
    const key = JSON.stringify(schema);
    let grammar = this.#grammars.get(key);
    if (grammar) {
      this.#grammars.delete(key);
    } else {
      grammar = this.llama.createGrammarForJsonSchema(schema as never) as Promise<LlamaGrammar>;
      grammar.catch(() => this.#grammars.delete(key));
    }
    this.#grammars.set(key, grammar);
    if (this.#grammars.size > this.capacity) this.#grammars.delete(this.#grammars.keys().next().value!);
    return grammar;
  }
}

function encode(value: number): string {
  return value < 0 ? `m${-value}` : String(value);
}

function decode(text: string): number {
  return text.startsWith("m") ? -Number(text.slice(1)) : Number(text);
}

/** The GBNF a marker stands for (see `MARKER`), or undefined for an unknown one. */
function markerRule(name: string): string | undefined {
  if (name === "uuid") {
    const hex = (count: number): string => `[0-9a-fA-F]{${count}}`;
    // RFC 9562's layout: a version digit 1-8 and the variant bits 10 (what validators check).
    return `("\\"" ${hex(8)} "-" ${hex(4)} "-" [1-8] ${hex(3)} "-" [89abAB] ${hex(3)} "-" ${hex(12)} "\\"")`;
  }
  const integer = /^i_(m?\d+)_(m?\d+)$/.exec(name);
  if (integer) {
    const range = integerRange(decode(integer[1]!), decode(integer[2]!));
    return range && toGbnf(range);
  }
  const number = /^n_(u|m?\d+[xi])_(u|m?\d+[xi])$/.exec(name);
  if (number) {
    const side = (text: string): Bound | undefined =>
      text === "u" ? undefined : { value: decode(text.slice(0, -1)), exclusive: text.endsWith("x") };
    const range = numberRange(side(number[1]!), side(number[2]!));
    return range && toGbnf(range);
  }
  return undefined;
}

/** node-llama-cpp's number rules, as its grammar builder writes them (`GbnfNumber`). */
const NUMBER = '"-"? ("0" | [1-9] [0-9]{0,15})';
const EXPONENT = ' ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?';
/** Integers of at most 15 digits (below 2^53, so a JSON parser keeps them exact), no exponent. */
const INTEGER = '"-"? ("0" | [1-9] [0-9]{0,14})';
const MARKER_LITERAL = new RegExp(`"\\\\"${MARKER}([a-z0-9_]+)\\\\""`, "g");

/**
 * A GBNF grammar as node-llama-cpp built it, with its number rules tightened (integers of at most 15
 * digits and no exponent, exponents of at most two digits) and markers replaced by their rules.
 */
export function patchedGrammar(grammar: string): string {
  return grammar
    .split("\n")
    .map((line) =>
      line.startsWith("integer-number-rule ::=")
        ? line.replace(`${NUMBER}${EXPONENT}`, INTEGER)
        : line
            .replaceAll(EXPONENT, " ([eE] [-+]? [0-9]{1,2})?")
            .replace(MARKER_LITERAL, (literal, name: string) => markerRule(name) ?? literal),
    )
    .join("\n");
}

/**
 * Makes every grammar `llama` builds go through `patchedGrammar` (see the file's comment), by
 * wrapping the native grammar constructor node-llama-cpp's `LlamaGrammar` calls. Returns false when
 * node-llama-cpp's internals are not where this expects them (the rules then stay as they are).
 */
export function patchNumberGrammar(llama: Llama): boolean {
  const bindings = (llama as unknown as { _bindings?: Record<string, unknown> })._bindings;
  const Native = bindings?.AddonGrammar as (new (grammar: string, options: unknown) => object) | undefined;
  if (typeof Native !== "function" || (Native as { sparkPatched?: boolean }).sparkPatched) return !!Native;
  const Patched = class extends Native {
    static sparkPatched = true;
    constructor(grammar: string, options: unknown) {
      super(typeof grammar === "string" ? patchedGrammar(grammar) : grammar, options);
    }
  };
  try {
    bindings!.AddonGrammar = Patched;
  } catch {
    return false;
  }
  return bindings!.AddonGrammar === Patched;
}
