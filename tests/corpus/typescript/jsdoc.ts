/**
 * A product in the catalogue.
 * Descriptions may span lines.
 *
 * @title Product
 */
export interface Product {
  /**
   * Stock keeping unit.
   * @pattern ^[A-Z]{3}-\d{4}$
   * @examples ["ABC-1234"]
   */
  sku: string;
  /**
   * @minLength 2
   * @maxLength 40
   * @default "Untitled"
   */
  name: string;
  /**
   * @exclusiveMinimum 0
   * @maximum 10000
   */
  price: number;
  /**
   * @asType integer
   * @minimum 0
   * @exclusiveMaximum 1000
   */
  stock: number;
  /**
   * @minItems 1
   * @maxItems 3
   * @uniqueItems
   */
  tags: string[];
  /** @format uri */
  homepage?: string;
  /** @format date */
  released: string;
  /** @deprecated */
  legacyCode?: string;
  /**
   * @multipleOf 5
   * @example 10
   */
  discount: number;
  /** @minProperties 1 */
  attributes: { [key: string]: string };
  /** @const "v1" */
  version: string;
}
