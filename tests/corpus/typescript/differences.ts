// Where jsonmode and ts-json-schema-generator 2.4 disagree, by design (README:
// "Differences by design"); tests/test_typescript_reference.py asserts each one.

/** @minLength 3 */
export type Code = string;

export interface Differences {
  /**
   * Annotations beside a reference: Draft 2020-12 applies them, Draft-07 (the
   * reference tool's output) ignores everything beside "$ref".
   * @maxLength 5
   */
  code: Code;
  /** The reference tool drops `string` from a union of it with a number literal. */
  loose: string | 1;
}
