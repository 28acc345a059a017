/**
 * Forcing a function call (`tool_choice: "required"` or a named tool) through node-llama-cpp's own
 * function-calling machinery.
 *
 * `LlamaChat` enters function-calling mode when the model writes the chat format's call prefix; from
 * there a grammar constrains the function's name (to the functions it was given) and its parameters
 * (to their schema). A chat wrapper may also tell it what to do when no prefix trigger matched at the
 * start of the answer (`noPrefixTrigger`); `{type: "functionCall"}` enters function-calling mode at
 * once. `ForcingChatWrapper` is the model's own chat wrapper with that one change while `force` is
 * set, so the answer starts with a call and its name and arguments are grammar-forced; the rendered
 * prompt is unchanged (so KV reuse is too). Formats whose wrapper starts the answer in
 * function-calling mode already (`functionCall.initiallyEngaged`) lose their way out of it instead.
 */
import { LlamaText, type ChatWrapper, type ChatWrapperGeneratedContextState } from "node-llama-cpp";

export interface CallForcing {
  /** Set for the length of one generation on the chat that uses the wrapper. */
  force: boolean;
}

/** The `inner` wrapper, whose answers start with a function call while `control.force` is set. */
export function forcingChatWrapper(inner: ChatWrapper, control: CallForcing): ChatWrapper {
  const forced = (state: ChatWrapperGeneratedContextState): ChatWrapperGeneratedContextState => {
    if (state.functionCall)
      return { ...state, functionCall: { initiallyEngaged: true, disengageInitiallyEngaged: [] } };
    return {
      ...state,
      prefixTriggers: [],
      noPrefixTrigger: { type: "functionCall", inject: LlamaText([]) },
      detectFunctionCalls: true,
    } as ChatWrapperGeneratedContextState;
  };
  return new Proxy(inner, {
    get(target, property) {
      if (property === "generateContextState")
        return (options: Parameters<ChatWrapper["generateContextState"]>[0]) => {
          const state = target.generateContextState(options);
          return control.force && options.availableFunctions ? forced(state) : state;
        };
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
