export interface Primitives {
  text: string;
  amount: number;
  /** @asType integer */
  count: number;
  flag: boolean;
  nothing: null;
  anything: any;
  whatever: unknown;
  bag: object;
  when: Date;
  maybe: string | null;
  either: string | number | boolean;
}
